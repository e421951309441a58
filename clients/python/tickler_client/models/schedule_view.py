from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.misfire import Misfire
from ..models.schedule_status import ScheduleStatus
from ..types import UNSET, Unset
from typing import cast

if TYPE_CHECKING:
  from ..models.occurrence_view import OccurrenceView
  from ..models.schedule_view_headers import ScheduleViewHeaders





T = TypeVar("T", bound="ScheduleView")



@_attrs_define
class ScheduleView:
    """ A schedule as the API shows it.

        Attributes:
            ack_timeout_ms (int):
            backoff_base_ms (int):
            backoff_cap_ms (int):
            created_at (str):
            created_by (str):
            expects_result (bool):
            headers (ScheduleViewHeaders):
            id (int):
            key (str):
            max_attempts (int):
            misfire (Misfire): What to do with occurrences whose time passed while no tickler created
                them (tickler was down, or the schedule could not be read).
            misfire_grace_ms (int):
            occurrences (int): Occurrences created as jobs so far.
            start_at (str):
            status (ScheduleStatus): `schedules.status`.
            topic (str):
            updated_at (str):
            version (int):
            cron (None | str | Unset):
            end_at (None | str | Unset):
            every_ms (int | None | Unset):
            jitter_ms (int | None | Unset): Each occurrence moved later by up to this.
            last_at (None | str | Unset): The latest occurrence created as a job.
            max_occurrences (int | None | Unset):
            next_at (None | str | Unset): The next occurrence not yet created as a job; null once ended.
            payload (Any | Unset):
            payload_base64 (None | str | Unset):
            pending (list[OccurrenceView] | None | Unset): Its pending occurrences, soonest first (at most 5; on single
                reads).
            time_zone (None | str | Unset):
            window_ms (int | None | Unset): Each occurrence's flexible window.
     """

    ack_timeout_ms: int
    backoff_base_ms: int
    backoff_cap_ms: int
    created_at: str
    created_by: str
    expects_result: bool
    headers: ScheduleViewHeaders
    id: int
    key: str
    max_attempts: int
    misfire: Misfire
    misfire_grace_ms: int
    occurrences: int
    start_at: str
    status: ScheduleStatus
    topic: str
    updated_at: str
    version: int
    cron: None | str | Unset = UNSET
    end_at: None | str | Unset = UNSET
    every_ms: int | None | Unset = UNSET
    jitter_ms: int | None | Unset = UNSET
    last_at: None | str | Unset = UNSET
    max_occurrences: int | None | Unset = UNSET
    next_at: None | str | Unset = UNSET
    payload: Any | Unset = UNSET
    payload_base64: None | str | Unset = UNSET
    pending: list[OccurrenceView] | None | Unset = UNSET
    time_zone: None | str | Unset = UNSET
    window_ms: int | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.occurrence_view import OccurrenceView # noqa: PLC0415
        from ..models.schedule_view_headers import ScheduleViewHeaders # noqa: PLC0415
        ack_timeout_ms = self.ack_timeout_ms

        backoff_base_ms = self.backoff_base_ms

        backoff_cap_ms = self.backoff_cap_ms

        created_at = self.created_at

        created_by = self.created_by

        expects_result = self.expects_result

        headers = self.headers.to_dict()

        id = self.id

        key = self.key

        max_attempts = self.max_attempts

        misfire = self.misfire.value

        misfire_grace_ms = self.misfire_grace_ms

        occurrences = self.occurrences

        start_at = self.start_at

        status = self.status.value

        topic = self.topic

        updated_at = self.updated_at

        version = self.version

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

        jitter_ms: int | None | Unset
        if isinstance(self.jitter_ms, Unset):
            jitter_ms = UNSET
        else:
            jitter_ms = self.jitter_ms

        last_at: None | str | Unset
        if isinstance(self.last_at, Unset):
            last_at = UNSET
        else:
            last_at = self.last_at

        max_occurrences: int | None | Unset
        if isinstance(self.max_occurrences, Unset):
            max_occurrences = UNSET
        else:
            max_occurrences = self.max_occurrences

        next_at: None | str | Unset
        if isinstance(self.next_at, Unset):
            next_at = UNSET
        else:
            next_at = self.next_at

        payload = self.payload

        payload_base64: None | str | Unset
        if isinstance(self.payload_base64, Unset):
            payload_base64 = UNSET
        else:
            payload_base64 = self.payload_base64

        pending: list[dict[str, Any]] | None | Unset
        if isinstance(self.pending, Unset):
            pending = UNSET
        elif isinstance(self.pending, list):
            pending = []
            for pending_type_0_item_data in self.pending:
                pending_type_0_item = pending_type_0_item_data.to_dict()
                pending.append(pending_type_0_item)


        else:
            pending = self.pending

        time_zone: None | str | Unset
        if isinstance(self.time_zone, Unset):
            time_zone = UNSET
        else:
            time_zone = self.time_zone

        window_ms: int | None | Unset
        if isinstance(self.window_ms, Unset):
            window_ms = UNSET
        else:
            window_ms = self.window_ms


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "ack_timeout_ms": ack_timeout_ms,
            "backoff_base_ms": backoff_base_ms,
            "backoff_cap_ms": backoff_cap_ms,
            "created_at": created_at,
            "created_by": created_by,
            "expects_result": expects_result,
            "headers": headers,
            "id": id,
            "key": key,
            "max_attempts": max_attempts,
            "misfire": misfire,
            "misfire_grace_ms": misfire_grace_ms,
            "occurrences": occurrences,
            "start_at": start_at,
            "status": status,
            "topic": topic,
            "updated_at": updated_at,
            "version": version,
        })
        if cron is not UNSET:
            field_dict["cron"] = cron
        if end_at is not UNSET:
            field_dict["end_at"] = end_at
        if every_ms is not UNSET:
            field_dict["every_ms"] = every_ms
        if jitter_ms is not UNSET:
            field_dict["jitter_ms"] = jitter_ms
        if last_at is not UNSET:
            field_dict["last_at"] = last_at
        if max_occurrences is not UNSET:
            field_dict["max_occurrences"] = max_occurrences
        if next_at is not UNSET:
            field_dict["next_at"] = next_at
        if payload is not UNSET:
            field_dict["payload"] = payload
        if payload_base64 is not UNSET:
            field_dict["payload_base64"] = payload_base64
        if pending is not UNSET:
            field_dict["pending"] = pending
        if time_zone is not UNSET:
            field_dict["time_zone"] = time_zone
        if window_ms is not UNSET:
            field_dict["window_ms"] = window_ms

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.occurrence_view import OccurrenceView # noqa: PLC0415
        from ..models.schedule_view_headers import ScheduleViewHeaders # noqa: PLC0415
        d = dict(src_dict)
        ack_timeout_ms = d.pop("ack_timeout_ms")

        backoff_base_ms = d.pop("backoff_base_ms")

        backoff_cap_ms = d.pop("backoff_cap_ms")

        created_at = d.pop("created_at")

        created_by = d.pop("created_by")

        expects_result = d.pop("expects_result")

        headers = ScheduleViewHeaders.from_dict(d.pop("headers"))




        id = d.pop("id")

        key = d.pop("key")

        max_attempts = d.pop("max_attempts")

        misfire = Misfire(d.pop("misfire"))




        misfire_grace_ms = d.pop("misfire_grace_ms")

        occurrences = d.pop("occurrences")

        start_at = d.pop("start_at")

        status = ScheduleStatus(d.pop("status"))




        topic = d.pop("topic")

        updated_at = d.pop("updated_at")

        version = d.pop("version")

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


        def _parse_jitter_ms(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        jitter_ms = _parse_jitter_ms(d.pop("jitter_ms", UNSET))


        def _parse_last_at(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        last_at = _parse_last_at(d.pop("last_at", UNSET))


        def _parse_max_occurrences(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        max_occurrences = _parse_max_occurrences(d.pop("max_occurrences", UNSET))


        def _parse_next_at(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        next_at = _parse_next_at(d.pop("next_at", UNSET))


        payload = d.pop("payload", UNSET)

        def _parse_payload_base64(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        payload_base64 = _parse_payload_base64(d.pop("payload_base64", UNSET))


        def _parse_pending(data: object) -> list[OccurrenceView] | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, list):
                    raise TypeError()
                pending_type_0 = []
                _pending_type_0 = data
                for pending_type_0_item_data in (_pending_type_0):
                    pending_type_0_item = OccurrenceView.from_dict(pending_type_0_item_data)



                    pending_type_0.append(pending_type_0_item)

                return pending_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(list[OccurrenceView] | None | Unset, data)

        pending = _parse_pending(d.pop("pending", UNSET))


        def _parse_time_zone(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        time_zone = _parse_time_zone(d.pop("time_zone", UNSET))


        def _parse_window_ms(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        window_ms = _parse_window_ms(d.pop("window_ms", UNSET))


        schedule_view = cls(
            ack_timeout_ms=ack_timeout_ms,
            backoff_base_ms=backoff_base_ms,
            backoff_cap_ms=backoff_cap_ms,
            created_at=created_at,
            created_by=created_by,
            expects_result=expects_result,
            headers=headers,
            id=id,
            key=key,
            max_attempts=max_attempts,
            misfire=misfire,
            misfire_grace_ms=misfire_grace_ms,
            occurrences=occurrences,
            start_at=start_at,
            status=status,
            topic=topic,
            updated_at=updated_at,
            version=version,
            cron=cron,
            end_at=end_at,
            every_ms=every_ms,
            jitter_ms=jitter_ms,
            last_at=last_at,
            max_occurrences=max_occurrences,
            next_at=next_at,
            payload=payload,
            payload_base64=payload_base64,
            pending=pending,
            time_zone=time_zone,
            window_ms=window_ms,
        )


        schedule_view.additional_properties = d
        return schedule_view

    @property
    def additional_keys(self) -> list[str]:
        return list(self.additional_properties.keys())

    def __getitem__(self, key: str) -> Any:
        return self.additional_properties[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.additional_properties[key] = value

    def __delitem__(self, key: str) -> None:
        del self.additional_properties[key]

    def __contains__(self, key: str) -> bool:
        return key in self.additional_properties
