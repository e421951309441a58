from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast

if TYPE_CHECKING:
  from ..models.schedule_view import ScheduleView





T = TypeVar("T", bound="ScheduleChanged")



@_attrs_define
class ScheduleChanged:
    """ Answer of a change that may have replaced pending occurrences.

        Attributes:
            replaced (int): Pending occurrences deleted (not yet due; created again from the
                new definition).
            schedule (ScheduleView): A schedule as the API shows it.
            updated (int): Pending occurrences whose payload, headers and policy were updated
                in place.
     """

    replaced: int
    schedule: ScheduleView
    updated: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.schedule_view import ScheduleView # noqa: PLC0415
        replaced = self.replaced

        schedule = self.schedule.to_dict()

        updated = self.updated


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "replaced": replaced,
            "schedule": schedule,
            "updated": updated,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.schedule_view import ScheduleView # noqa: PLC0415
        d = dict(src_dict)
        replaced = d.pop("replaced")

        schedule = ScheduleView.from_dict(d.pop("schedule"))




        updated = d.pop("updated")

        schedule_changed = cls(
            replaced=replaced,
            schedule=schedule,
            updated=updated,
        )


        schedule_changed.additional_properties = d
        return schedule_changed

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
