from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.misfire import Misfire
from ..types import UNSET, Unset
from typing import cast

if TYPE_CHECKING:
  from ..models.create_schedule_headers_type_0 import CreateScheduleHeadersType0





T = TypeVar("T", bound="CreateSchedule")



@_attrs_define
class CreateSchedule:
    """ Body of `POST /v1/schedules`: a job's fields (but its time) and when it
    repeats.

        Attributes:
            ack_timeout_ms (int | None | Unset):
            backoff_base_ms (int | None | Unset):
            backoff_cap_ms (int | None | Unset):
            cron (None | str | Unset): Cron: 5 fields (minute hour day-of-month month day-of-week) or 6
                (seconds first), read on the clock of `time_zone`.
            end_at (None | str | Unset): No occurrence after this (inclusive).
            every_ms (int | None | Unset): Or a fixed period in milliseconds (at least 1000), from `start_at`.
            expects_result (bool | None | Unset):
            headers (CreateScheduleHeadersType0 | None | Unset):
            jitter_ms (int | None | Unset): Each occurrence moved later by up to this many milliseconds,
                decided from its key (0 to 86400000; 0: none).
            key (None | str | Unset): The schedule's key: unique per topic, and the start of each
                occurrence's job key (`<key>@<instant>`). At most 230 characters.
            max_attempts (int | None | Unset):
            max_occurrences (int | None | Unset): Stop after creating this many occurrences.
            misfire (Misfire | None | Unset):
            misfire_grace_ms (int | None | Unset): How late an occurrence may be and still count as on time (default
                60000).
            payload (Any | Unset):
            payload_base64 (None | str | Unset):
            start_at (None | str | Unset): No occurrence before this (RFC 3339; default now).
            time_zone (None | str | Unset): IANA time zone of `cron` (default `UTC`).
            topic (None | str | Unset):
            window_ms (int | None | Unset): Each occurrence's flexible window, as a job's `window_ms` (0 to
                86400000; 0: none).
     """

    ack_timeout_ms: int | None | Unset = UNSET
    backoff_base_ms: int | None | Unset = UNSET
    backoff_cap_ms: int | None | Unset = UNSET
    cron: None | str | Unset = UNSET
    end_at: None | str | Unset = UNSET
    every_ms: int | None | Unset = UNSET
    expects_result: bool | None | Unset = UNSET
    headers: CreateScheduleHeadersType0 | None | Unset = UNSET
    jitter_ms: int | None | Unset = UNSET
    key: None | str | Unset = UNSET
    max_attempts: int | None | Unset = UNSET
    max_occurrences: int | None | Unset = UNSET
    misfire: Misfire | None | Unset = UNSET
    misfire_grace_ms: int | None | Unset = UNSET
    payload: Any | Unset = UNSET
    payload_base64: None | str | Unset = UNSET
    start_at: None | str | Unset = UNSET
    time_zone: None | str | Unset = UNSET
    topic: None | str | Unset = UNSET
    window_ms: int | None | Unset = UNSET





    def to_dict(self) -> dict[str, Any]:
        from ..models.create_schedule_headers_type_0 import CreateScheduleHeadersType0 # noqa: PLC0415
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

        cron: None | str | Unset
        if isinstance(self.cron, Unset):
            cron = UNSET
        else:
            cron = self.cron

        end_at: None | str | Unset
        if isinstance(self.end_at, Unset):
            end_at = UNSET
        else:
            end_at = self.end_at

        every_ms: int | None | Unset
        if isinstance(self.every_ms, Unset):
            every_ms = UNSET
        else:
            every_ms = self.every_ms

        expects_result: bool | None | Unset
        if isinstance(self.expects_result, Unset):
            expects_result = UNSET
        else:
            expects_result = self.expects_result

        headers: dict[str, Any] | None | Unset
        if isinstance(self.headers, Unset):
            headers = UNSET
        elif isinstance(self.headers, CreateScheduleHeadersType0):
            headers = self.headers.to_dict()
        else:
            headers = self.headers

        jitter_ms: int | None | Unset
        if isinstance(self.jitter_ms, Unset):
            jitter_ms = UNSET
        else:
            jitter_ms = self.jitter_ms

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

        max_occurrences: int | None | Unset
        if isinstance(self.max_occurrences, Unset):
            max_occurrences = UNSET
        else:
            max_occurrences = self.max_occurrences

        misfire: None | str | Unset
        if isinstance(self.misfire, Unset):
            misfire = UNSET
        elif isinstance(self.misfire, Misfire):
            misfire = self.misfire.value
        else:
            misfire = self.misfire

        misfire_grace_ms: int | None | Unset
        if isinstance(self.misfire_grace_ms, Unset):
            misfire_grace_ms = UNSET
        else:
            misfire_grace_ms = self.misfire_grace_ms

        payload = self.payload

        payload_base64: None | str | Unset
        if isinstance(self.payload_base64, Unset):
            payload_base64 = UNSET
        else:
            payload_base64 = self.payload_base64

        start_at: None | str | Unset
        if isinstance(self.start_at, Unset):
            start_at = UNSET
        else:
            start_at = self.start_at

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
        if cron is not UNSET:
            field_dict["cron"] = cron
        if end_at is not UNSET:
            field_dict["end_at"] = end_at
        if every_ms is not UNSET:
            field_dict["every_ms"] = every_ms
        if expects_result is not UNSET:
            field_dict["expects_result"] = expects_result
        if headers is not UNSET:
            field_dict["headers"] = headers
        if jitter_ms is not UNSET:
            field_dict["jitter_ms"] = jitter_ms
        if key is not UNSET:
            field_dict["key"] = key
        if max_attempts is not UNSET:
            field_dict["max_attempts"] = max_attempts
        if max_occurrences is not UNSET:
            field_dict["max_occurrences"] = max_occurrences
        if misfire is not UNSET:
            field_dict["misfire"] = misfire
        if misfire_grace_ms is not UNSET:
            field_dict["misfire_grace_ms"] = misfire_grace_ms
        if payload is not UNSET:
            field_dict["payload"] = payload
        if payload_base64 is not UNSET:
            field_dict["payload_base64"] = payload_base64
        if start_at is not UNSET:
            field_dict["start_at"] = start_at
        if time_zone is not UNSET:
            field_dict["time_zone"] = time_zone
        if topic is not UNSET:
            field_dict["topic"] = topic
        if window_ms is not UNSET:
            field_dict["window_ms"] = window_ms

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.create_schedule_headers_type_0 import CreateScheduleHeadersType0 # noqa: PLC0415
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


        def _parse_cron(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        cron = _parse_cron(d.pop("cron", UNSET))


        def _parse_end_at(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        end_at = _parse_end_at(d.pop("end_at", UNSET))


        def _parse_every_ms(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        every_ms = _parse_every_ms(d.pop("every_ms", UNSET))


        def _parse_expects_result(data: object) -> bool | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(bool | None | Unset, data)

        expects_result = _parse_expects_result(d.pop("expects_result", UNSET))


        def _parse_headers(data: object) -> CreateScheduleHeadersType0 | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                headers_type_0 = CreateScheduleHeadersType0.from_dict(data)



                return headers_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(CreateScheduleHeadersType0 | None | Unset, data)

        headers = _parse_headers(d.pop("headers", UNSET))


        def _parse_jitter_ms(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        jitter_ms = _parse_jitter_ms(d.pop("jitter_ms", UNSET))


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


        def _parse_max_occurrences(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        max_occurrences = _parse_max_occurrences(d.pop("max_occurrences", UNSET))


        def _parse_misfire(data: object) -> Misfire | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                misfire_type_1 = Misfire(data)



                return misfire_type_1
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(Misfire | None | Unset, data)

        misfire = _parse_misfire(d.pop("misfire", UNSET))


        def _parse_misfire_grace_ms(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        misfire_grace_ms = _parse_misfire_grace_ms(d.pop("misfire_grace_ms", UNSET))


        payload = d.pop("payload", UNSET)

        def _parse_payload_base64(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        payload_base64 = _parse_payload_base64(d.pop("payload_base64", UNSET))


        def _parse_start_at(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        start_at = _parse_start_at(d.pop("start_at", UNSET))


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


        def _parse_window_ms(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        window_ms = _parse_window_ms(d.pop("window_ms", UNSET))


        create_schedule = cls(
            ack_timeout_ms=ack_timeout_ms,
            backoff_base_ms=backoff_base_ms,
            backoff_cap_ms=backoff_cap_ms,
            cron=cron,
            end_at=end_at,
            every_ms=every_ms,
            expects_result=expects_result,
            headers=headers,
            jitter_ms=jitter_ms,
            key=key,
            max_attempts=max_attempts,
            max_occurrences=max_occurrences,
            misfire=misfire,
            misfire_grace_ms=misfire_grace_ms,
            payload=payload,
            payload_base64=payload_base64,
            start_at=start_at,
            time_zone=time_zone,
            topic=topic,
            window_ms=window_ms,
        )

        return create_schedule

