from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset







T = TypeVar("T", bound="ScheduleStats")



@_attrs_define
class ScheduleStats:
    """ Schedules and topic controls at a glance (the truth's figures).

        Attributes:
            active (int):
            behind (int): Active schedules whose next occurrence is over a minute past its
                time and still not a job.
            ended (int):
            paused (int):
            topics_paused (int): Topics paused (`topic_controls`).
     """

    active: int
    behind: int
    ended: int
    paused: int
    topics_paused: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        active = self.active

        behind = self.behind

        ended = self.ended

        paused = self.paused

        topics_paused = self.topics_paused


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "active": active,
            "behind": behind,
            "ended": ended,
            "paused": paused,
            "topics_paused": topics_paused,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        active = d.pop("active")

        behind = d.pop("behind")

        ended = d.pop("ended")

        paused = d.pop("paused")

        topics_paused = d.pop("topics_paused")

        schedule_stats = cls(
            active=active,
            behind=behind,
            ended=ended,
            paused=paused,
            topics_paused=topics_paused,
        )


        schedule_stats.additional_properties = d
        return schedule_stats

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
