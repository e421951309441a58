from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast

if TYPE_CHECKING:
  from ..models.create_job_headers_type_0 import CreateJobHeadersType0





T = TypeVar("T", bound="CreateJob")



@_attrs_define
class CreateJob:
    """ Body of `POST /v1/jobs`, and each item of `POST /v1/jobs/batch`.

        Attributes:
            ack_timeout_ms (int | None | Unset):
            backoff_base_ms (int | None | Unset):
            backoff_cap_ms (int | None | Unset):
            delay_ms (int | None | Unset): Delay from now (the database's now), in milliseconds.
            expects_result (bool | None | Unset): Result policy; what is left out comes from the topic's
                configuration, then the defaults. (Listed, not flattened: serde's
                `flatten` would disable `deny_unknown_fields`.)
            expires_at (None | str | Unset): RFC 3339 time after run_at: a job not produced by then expires
                (status `expired`) and is never produced.
            headers (CreateJobHeadersType0 | None | Unset):
            key (None | str | Unset):
            max_attempts (int | None | Unset):
            max_delay_ms (int | None | Unset): With `debounce`: the longest a job may be moved past its
                generation's first request, in milliseconds (1 to
                `jobs.max_schedule_ahead_days`); left out, no ceiling.
            on_conflict (None | str | Unset): When a job holds this topic and key already: `reject` (the
                default: the same request answers that job, another is refused
                `key_conflict`) or `debounce` (needs a key): a pending job is moved
                to this request's time with its payload and headers, never past
                the first request of its generation + `max_delay_ms`; one that went
                out is followed by a new job, its next generation.
            payload (Any | Unset): Any JSON value but null; produced as its JSON text.
            payload_base64 (None | str | Unset): Raw bytes, base64 (standard alphabet, padded).
            run_at (None | str | Unset): RFC 3339 time; any offset, normalised to UTC.
            run_local (None | str | Unset): Or a wall-clock time, with `time_zone`: a local date and time
                without offset (`2027-03-28T09:00:00`). tickler keeps it, the zone
                and the tzdata release beside the instant it computes, and moves
                the job if a newer tzdata changes that instant.
            time_zone (None | str | Unset): The IANA zone `run_local` is read in (`Europe/Berlin`).
            topic (None | str | Unset):
            ttl_ms (int | None | Unset): Or: how long after its run_at (the end of its window, with one) the
                job may still be produced, in milliseconds.
            window_ms (int | None | Unset): A flexible window: the job may be produced at any instant of
                [run_at, run_at + window_ms]; tickler spreads what falls due
                together over it (0 to 86400000; 0: none).
     """

    ack_timeout_ms: int | None | Unset = UNSET
    backoff_base_ms: int | None | Unset = UNSET
    backoff_cap_ms: int | None | Unset = UNSET
    delay_ms: int | None | Unset = UNSET
    expects_result: bool | None | Unset = UNSET
    expires_at: None | str | Unset = UNSET
    headers: CreateJobHeadersType0 | None | Unset = UNSET
    key: None | str | Unset = UNSET
    max_attempts: int | None | Unset = UNSET
    max_delay_ms: int | None | Unset = UNSET
    on_conflict: None | str | Unset = UNSET
    payload: Any | Unset = UNSET
    payload_base64: None | str | Unset = UNSET
    run_at: None | str | Unset = UNSET
    run_local: None | str | Unset = UNSET
    time_zone: None | str | Unset = UNSET
    topic: None | str | Unset = UNSET
    ttl_ms: int | None | Unset = UNSET
    window_ms: int | None | Unset = UNSET





    def to_dict(self) -> dict[str, Any]:
        from ..models.create_job_headers_type_0 import CreateJobHeadersType0 # noqa: PLC0415
        ack_timeout_ms: int | None | Unset
        if isinstance(self.ack_timeout_ms, Unset):
            ack_timeout_ms = UNSET
        else:
            ack_timeout_ms = self.ack_timeout_ms

        backoff_base_ms: int | None | Unset
        if isinstance(self.backoff_base_ms, Unset):
            backoff_base_ms = UNSET
        else:
            backoff_base_ms = self.backoff_base_ms

        backoff_cap_ms: int | None | Unset
        if isinstance(self.backoff_cap_ms, Unset):
            backoff_cap_ms = UNSET
        else:
            backoff_cap_ms = self.backoff_cap_ms

        delay_ms: int | None | Unset
        if isinstance(self.delay_ms, Unset):
            delay_ms = UNSET
        else:
            delay_ms = self.delay_ms

        expects_result: bool | None | Unset
        if isinstance(self.expects_result, Unset):
            expects_result = UNSET
        else:
            expects_result = self.expects_result

        expires_at: None | str | Unset
        if isinstance(self.expires_at, Unset):
            expires_at = UNSET
        else:
            expires_at = self.expires_at

        headers: dict[str, Any] | None | Unset
        if isinstance(self.headers, Unset):
            headers = UNSET
        elif isinstance(self.headers, CreateJobHeadersType0):
            headers = self.headers.to_dict()
        else:
            headers = self.headers

        key: None | str | Unset
        if isinstance(self.key, Unset):
            key = UNSET
        else:
            key = self.key

        max_attempts: int | None | Unset
        if isinstance(self.max_attempts, Unset):
            max_attempts = UNSET
        else:
            max_attempts = self.max_attempts

        max_delay_ms: int | None | Unset
        if isinstance(self.max_delay_ms, Unset):
            max_delay_ms = UNSET
        else:
            max_delay_ms = self.max_delay_ms

        on_conflict: None | str | Unset
        if isinstance(self.on_conflict, Unset):
            on_conflict = UNSET
        else:
            on_conflict = self.on_conflict

        payload = self.payload

        payload_base64: None | str | Unset
        if isinstance(self.payload_base64, Unset):
            payload_base64 = UNSET
        else:
            payload_base64 = self.payload_base64

        run_at: None | str | Unset
        if isinstance(self.run_at, Unset):
            run_at = UNSET
        else:
            run_at = self.run_at

        run_local: None | str | Unset
        if isinstance(self.run_local, Unset):
            run_local = UNSET
        else:
            run_local = self.run_local

        time_zone: None | str | Unset
        if isinstance(self.time_zone, Unset):
            time_zone = UNSET
        else:
            time_zone = self.time_zone

        topic: None | str | Unset
        if isinstance(self.topic, Unset):
            topic = UNSET
        else:
            topic = self.topic

        ttl_ms: int | None | Unset
        if isinstance(self.ttl_ms, Unset):
            ttl_ms = UNSET
        else:
            ttl_ms = self.ttl_ms

        window_ms: int | None | Unset
        if isinstance(self.window_ms, Unset):
            window_ms = UNSET
        else:
            window_ms = self.window_ms


        field_dict: dict[str, Any] = {}

        field_dict.update({
        })
        if ack_timeout_ms is not UNSET:
            field_dict["ack_timeout_ms"] = ack_timeout_ms
        if backoff_base_ms is not UNSET:
            field_dict["backoff_base_ms"] = backoff_base_ms
        if backoff_cap_ms is not UNSET:
            field_dict["backoff_cap_ms"] = backoff_cap_ms
        if delay_ms is not UNSET:
            field_dict["delay_ms"] = delay_ms
        if expects_result is not UNSET:
            field_dict["expects_result"] = expects_result
        if expires_at is not UNSET:
            field_dict["expires_at"] = expires_at
        if headers is not UNSET:
            field_dict["headers"] = headers
        if key is not UNSET:
            field_dict["key"] = key
        if max_attempts is not UNSET:
            field_dict["max_attempts"] = max_attempts
        if max_delay_ms is not UNSET:
            field_dict["max_delay_ms"] = max_delay_ms
        if on_conflict is not UNSET:
            field_dict["on_conflict"] = on_conflict
        if payload is not UNSET:
            field_dict["payload"] = payload
        if payload_base64 is not UNSET:
            field_dict["payload_base64"] = payload_base64
        if run_at is not UNSET:
            field_dict["run_at"] = run_at
        if run_local is not UNSET:
            field_dict["run_local"] = run_local
        if time_zone is not UNSET:
            field_dict["time_zone"] = time_zone
        if topic is not UNSET:
            field_dict["topic"] = topic
        if ttl_ms is not UNSET:
            field_dict["ttl_ms"] = ttl_ms
        if window_ms is not UNSET:
            field_dict["window_ms"] = window_ms

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.create_job_headers_type_0 import CreateJobHeadersType0 # noqa: PLC0415
        d = dict(src_dict)
        def _parse_ack_timeout_ms(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        ack_timeout_ms = _parse_ack_timeout_ms(d.pop("ack_timeout_ms", UNSET))


        def _parse_backoff_base_ms(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        backoff_base_ms = _parse_backoff_base_ms(d.pop("backoff_base_ms", UNSET))


        def _parse_backoff_cap_ms(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        backoff_cap_ms = _parse_backoff_cap_ms(d.pop("backoff_cap_ms", UNSET))


        def _parse_delay_ms(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        delay_ms = _parse_delay_ms(d.pop("delay_ms", UNSET))


        def _parse_expects_result(data: object) -> bool | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(bool | None | Unset, data)

        expects_result = _parse_expects_result(d.pop("expects_result", UNSET))


        def _parse_expires_at(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        expires_at = _parse_expires_at(d.pop("expires_at", UNSET))


        def _parse_headers(data: object) -> CreateJobHeadersType0 | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                headers_type_0 = CreateJobHeadersType0.from_dict(data)



                return headers_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(CreateJobHeadersType0 | None | Unset, data)

        headers = _parse_headers(d.pop("headers", UNSET))


        def _parse_key(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        key = _parse_key(d.pop("key", UNSET))


        def _parse_max_attempts(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        max_attempts = _parse_max_attempts(d.pop("max_attempts", UNSET))


        def _parse_max_delay_ms(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        max_delay_ms = _parse_max_delay_ms(d.pop("max_delay_ms", UNSET))


        def _parse_on_conflict(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        on_conflict = _parse_on_conflict(d.pop("on_conflict", UNSET))


        payload = d.pop("payload", UNSET)

        def _parse_payload_base64(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        payload_base64 = _parse_payload_base64(d.pop("payload_base64", UNSET))


        def _parse_run_at(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        run_at = _parse_run_at(d.pop("run_at", UNSET))


        def _parse_run_local(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        run_local = _parse_run_local(d.pop("run_local", UNSET))


        def _parse_time_zone(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        time_zone = _parse_time_zone(d.pop("time_zone", UNSET))


        def _parse_topic(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        topic = _parse_topic(d.pop("topic", UNSET))


        def _parse_ttl_ms(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        ttl_ms = _parse_ttl_ms(d.pop("ttl_ms", UNSET))


        def _parse_window_ms(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        window_ms = _parse_window_ms(d.pop("window_ms", UNSET))


        create_job = cls(
            ack_timeout_ms=ack_timeout_ms,
            backoff_base_ms=backoff_base_ms,
            backoff_cap_ms=backoff_cap_ms,
            delay_ms=delay_ms,
            expects_result=expects_result,
            expires_at=expires_at,
            headers=headers,
            key=key,
            max_attempts=max_attempts,
            max_delay_ms=max_delay_ms,
            on_conflict=on_conflict,
            payload=payload,
            payload_base64=payload_base64,
            run_at=run_at,
            run_local=run_local,
            time_zone=time_zone,
            topic=topic,
            ttl_ms=ttl_ms,
            window_ms=window_ms,
        )

        return create_job

