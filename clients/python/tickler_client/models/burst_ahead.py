from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset







T = TypeVar("T", bound="BurstAhead")



@_attrs_define
class BurstAhead:
    """ The busiest minute ahead of one topic.

        Attributes:
            at (str): When the minute starts.
            drain_seconds (float): How long producing that minute's jobs takes at that rate: past 60,
                the last of them go out that much late, and the minutes after wait
                behind them.
            jobs (int): Pending jobs due in it.
            per_second (int): What the topic can take, in jobs a second: its pace, or else
                `gauges.burst_drain_per_second`.
            topic (str):
     """

    at: str
    drain_seconds: float
    jobs: int
    per_second: int
    topic: str
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        at = self.at

        drain_seconds = self.drain_seconds

        jobs = self.jobs

        per_second = self.per_second

        topic = self.topic


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "at": at,
            "drain_seconds": drain_seconds,
            "jobs": jobs,
            "per_second": per_second,
            "topic": topic,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        at = d.pop("at")

        drain_seconds = d.pop("drain_seconds")

        jobs = d.pop("jobs")

        per_second = d.pop("per_second")

        topic = d.pop("topic")

        burst_ahead = cls(
            at=at,
            drain_seconds=drain_seconds,
            jobs=jobs,
            per_second=per_second,
            topic=topic,
        )


        burst_ahead.additional_properties = d
        return burst_ahead

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
