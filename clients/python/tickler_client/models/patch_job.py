from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast

if TYPE_CHECKING:
  from ..models.patch_job_headers_type_0 import PatchJobHeadersType0





T = TypeVar("T", bound="PatchJob")



@_attrs_define
class PatchJob:
    """ Body of `PATCH /v1/jobs/{id}`: the version read, and what to change.

        Attributes:
            delay_ms (int | None | Unset):
            expires_at (None | str | Unset): A new expiry (RFC 3339, after the run_at), or null: none. Left out,
                the job keeps its expiry, which must then come after a new run_at.
            headers (None | PatchJobHeadersType0 | Unset):
            payload (Any | Unset):
            payload_base64 (None | str | Unset):
            run_at (None | str | Unset):
            run_local (None | str | Unset): Or a new wall-clock time, with `time_zone` (as on create). A new
                `run_at` or `delay_ms` ends a job's wall-clock time.
            time_zone (None | str | Unset):
            topic (None | str | Unset): Move the job to another Kafka topic (retarget): it keeps its id,
                key, payload, time and attempt. The topic must exist on the broker
                (as for a new job) and be within the caller's topics; a job there
                holding the same key refuses it (409 `key_conflict`).
            ttl_ms (int | None | Unset): Or a new expiry this long after the (new) run_at.
            version (int | None | Unset):
            window_ms (int | None | Unset): A new flexible window, or null (or 0): none. Left out, the job keeps
                its window through a move.
     """

    delay_ms: int | None | Unset = UNSET
    expires_at: None | str | Unset = UNSET
    headers: None | PatchJobHeadersType0 | Unset = UNSET
    payload: Any | Unset = UNSET
    payload_base64: None | str | Unset = UNSET
    run_at: None | str | Unset = UNSET
    run_local: None | str | Unset = UNSET
    time_zone: None | str | Unset = UNSET
    topic: None | str | Unset = UNSET
    ttl_ms: int | None | Unset = UNSET
    version: int | None | Unset = UNSET
    window_ms: int | None | Unset = UNSET





    def to_dict(self) -> dict[str, Any]:
        from ..models.patch_job_headers_type_0 import PatchJobHeadersType0 # noqa: PLC0415
        delay_ms: int | None | Unset
        if isinstance(self.delay_ms, Unset):
            delay_ms = UNSET
        else:
            delay_ms = self.delay_ms

        expires_at: None | str | Unset
        if isinstance(self.expires_at, Unset):
            expires_at = UNSET
        else:
            expires_at = self.expires_at

        headers: dict[str, Any] | None | Unset
        if isinstance(self.headers, Unset):
            headers = UNSET
        elif isinstance(self.headers, PatchJobHeadersType0):
            headers = self.headers.to_dict()
        else:
            headers = self.headers

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

        version: int | None | Unset
        if isinstance(self.version, Unset):
            version = UNSET
        else:
            version = self.version

        window_ms: int | None | Unset
        if isinstance(self.window_ms, Unset):
            window_ms = UNSET
        else:
            window_ms = self.window_ms


        field_dict: dict[str, Any] = {}

        field_dict.update({
        })
        if delay_ms is not UNSET:
            field_dict["delay_ms"] = delay_ms
        if expires_at is not UNSET:
            field_dict["expires_at"] = expires_at
        if headers is not UNSET:
            field_dict["headers"] = headers
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
        if version is not UNSET:
            field_dict["version"] = version
        if window_ms is not UNSET:
            field_dict["window_ms"] = window_ms

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.patch_job_headers_type_0 import PatchJobHeadersType0 # noqa: PLC0415
        d = dict(src_dict)
        def _parse_delay_ms(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        delay_ms = _parse_delay_ms(d.pop("delay_ms", UNSET))


        def _parse_expires_at(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        expires_at = _parse_expires_at(d.pop("expires_at", UNSET))


        def _parse_headers(data: object) -> None | PatchJobHeadersType0 | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                headers_type_0 = PatchJobHeadersType0.from_dict(data)



                return headers_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | PatchJobHeadersType0 | Unset, data)

        headers = _parse_headers(d.pop("headers", UNSET))


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


        def _parse_version(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        version = _parse_version(d.pop("version", UNSET))


        def _parse_window_ms(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        window_ms = _parse_window_ms(d.pop("window_ms", UNSET))


        patch_job = cls(
            delay_ms=delay_ms,
            expires_at=expires_at,
            headers=headers,
            payload=payload,
            payload_base64=payload_base64,
            run_at=run_at,
            run_local=run_local,
            time_zone=time_zone,
            topic=topic,
            ttl_ms=ttl_ms,
            version=version,
            window_ms=window_ms,
        )

        return patch_job

