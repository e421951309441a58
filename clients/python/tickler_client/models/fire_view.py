from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.fire_outcome import FireOutcome
from ..models.status import Status
from ..types import UNSET, Unset
from typing import cast

if TYPE_CHECKING:
  from ..models.consumed_view import ConsumedView





T = TypeVar("T", bound="FireView")



@_attrs_define
class FireView:
    """ One occurrence expected, and what became of it.

        Attributes:
            expected_at (str): The occurrence's instant (its job key's `@…`).
            outcome (FireOutcome): What became of one occurrence.
            consumed (list[ConsumedView] | Unset): When each consumer group that reads its partition read past its
                record (`at` null: not yet); for the first 1,000 produced
                occurrences of an answer.
            dispatched_at (None | str | Unset): Where and when its record went, once produced.
            job_id (int | None | Unset):
            offset (int | None | Unset):
            partition (int | None | Unset):
            run_at (None | str | Unset): When its job runs or ran (jitter, a window, a `fire_once` misfire
                or a retry move it from `expected_at`).
            status (None | Status | Unset):
            verified_at (None | str | Unset): When its record was read back at that position and found there
                (`dispatcher.verify`).
     """

    expected_at: str
    outcome: FireOutcome
    consumed: list[ConsumedView] | Unset = UNSET
    dispatched_at: None | str | Unset = UNSET
    job_id: int | None | Unset = UNSET
    offset: int | None | Unset = UNSET
    partition: int | None | Unset = UNSET
    run_at: None | str | Unset = UNSET
    status: None | Status | Unset = UNSET
    verified_at: None | str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.consumed_view import ConsumedView # noqa: PLC0415
        expected_at = self.expected_at

        outcome = self.outcome.value

        consumed: list[dict[str, Any]] | Unset = UNSET
        if not isinstance(self.consumed, Unset):
            consumed = []
            for consumed_item_data in self.consumed:
                consumed_item = consumed_item_data.to_dict()
                consumed.append(consumed_item)



        dispatched_at: None | str | Unset
        if isinstance(self.dispatched_at, Unset):
            dispatched_at = UNSET
        else:
            dispatched_at = self.dispatched_at

        job_id: int | None | Unset
        if isinstance(self.job_id, Unset):
            job_id = UNSET
        else:
            job_id = self.job_id

        offset: int | None | Unset
        if isinstance(self.offset, Unset):
            offset = UNSET
        else:
            offset = self.offset

        partition: int | None | Unset
        if isinstance(self.partition, Unset):
            partition = UNSET
        else:
            partition = self.partition

        run_at: None | str | Unset
        if isinstance(self.run_at, Unset):
            run_at = UNSET
        else:
            run_at = self.run_at

        status: None | str | Unset
        if isinstance(self.status, Unset):
            status = UNSET
        elif isinstance(self.status, Status):
            status = self.status.value
        else:
            status = self.status

        verified_at: None | str | Unset
        if isinstance(self.verified_at, Unset):
            verified_at = UNSET
        else:
            verified_at = self.verified_at


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "expected_at": expected_at,
            "outcome": outcome,
        })
        if consumed is not UNSET:
            field_dict["consumed"] = consumed
        if dispatched_at is not UNSET:
            field_dict["dispatched_at"] = dispatched_at
        if job_id is not UNSET:
            field_dict["job_id"] = job_id
        if offset is not UNSET:
            field_dict["offset"] = offset
        if partition is not UNSET:
            field_dict["partition"] = partition
        if run_at is not UNSET:
            field_dict["run_at"] = run_at
        if status is not UNSET:
            field_dict["status"] = status
        if verified_at is not UNSET:
            field_dict["verified_at"] = verified_at

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.consumed_view import ConsumedView # noqa: PLC0415
        d = dict(src_dict)
        expected_at = d.pop("expected_at")

        outcome = FireOutcome(d.pop("outcome"))




        _consumed = d.pop("consumed", UNSET)
        consumed: list[ConsumedView] | Unset = UNSET
        if _consumed is not UNSET:
            consumed = []
            for consumed_item_data in _consumed:
                consumed_item = ConsumedView.from_dict(consumed_item_data)



                consumed.append(consumed_item)


        def _parse_dispatched_at(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        dispatched_at = _parse_dispatched_at(d.pop("dispatched_at", UNSET))


        def _parse_job_id(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        job_id = _parse_job_id(d.pop("job_id", UNSET))


        def _parse_offset(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        offset = _parse_offset(d.pop("offset", UNSET))


        def _parse_partition(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        partition = _parse_partition(d.pop("partition", UNSET))


        def _parse_run_at(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        run_at = _parse_run_at(d.pop("run_at", UNSET))


        def _parse_status(data: object) -> None | Status | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                status_type_1 = Status(data)



                return status_type_1
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | Status | Unset, data)

        status = _parse_status(d.pop("status", UNSET))


        def _parse_verified_at(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        verified_at = _parse_verified_at(d.pop("verified_at", UNSET))


        fire_view = cls(
            expected_at=expected_at,
            outcome=outcome,
            consumed=consumed,
            dispatched_at=dispatched_at,
            job_id=job_id,
            offset=offset,
            partition=partition,
            run_at=run_at,
            status=status,
            verified_at=verified_at,
        )


        fire_view.additional_properties = d
        return fire_view

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
