from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast

if TYPE_CHECKING:
  from ..models.fire_view import FireView





T = TypeVar("T", bound="ScheduleAudit")



@_attrs_define
class ScheduleAudit:
    """ Answer of `GET /v1/schedules/{id}/audit`.

        Attributes:
            at (str): The database's clock when it was read: an occurrence after it is
                `upcoming`, one before it without a job and without a reason
                `missing`.
            expected (int): Occurrences the timing expected in the interval.
            fired (int): Of those, `produced`.
            from_ (str):
            missing (int): Of those, `missing`.
            occurrences (list[FireView]): In order of `expected_at`.
            schedule_id (int):
            to (str):
     """

    at: str
    expected: int
    fired: int
    from_: str
    missing: int
    occurrences: list[FireView]
    schedule_id: int
    to: str
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.fire_view import FireView # noqa: PLC0415
        at = self.at

        expected = self.expected

        fired = self.fired

        from_ = self.from_

        missing = self.missing

        occurrences = []
        for occurrences_item_data in self.occurrences:
            occurrences_item = occurrences_item_data.to_dict()
            occurrences.append(occurrences_item)



        schedule_id = self.schedule_id

        to = self.to


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "at": at,
            "expected": expected,
            "fired": fired,
            "from": from_,
            "missing": missing,
            "occurrences": occurrences,
            "schedule_id": schedule_id,
            "to": to,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.fire_view import FireView # noqa: PLC0415
        d = dict(src_dict)
        at = d.pop("at")

        expected = d.pop("expected")

        fired = d.pop("fired")

        from_ = d.pop("from")

        missing = d.pop("missing")

        occurrences = []
        _occurrences = d.pop("occurrences")
        for occurrences_item_data in (_occurrences):
            occurrences_item = FireView.from_dict(occurrences_item_data)



            occurrences.append(occurrences_item)


        schedule_id = d.pop("schedule_id")

        to = d.pop("to")

        schedule_audit = cls(
            at=at,
            expected=expected,
            fired=fired,
            from_=from_,
            missing=missing,
            occurrences=occurrences,
            schedule_id=schedule_id,
            to=to,
        )


        schedule_audit.additional_properties = d
        return schedule_audit

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
