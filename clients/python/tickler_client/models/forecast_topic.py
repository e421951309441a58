from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast






T = TypeVar("T", bound="ForecastTopic")



@_attrs_define
class ForecastTopic:
    """ 
        Attributes:
            jobs (int):
            peak (int):
            projected (int):
            topic (str):
            peak_at (None | str | Unset): Its busiest bucket's start and count (jobs and projected).
     """

    jobs: int
    peak: int
    projected: int
    topic: str
    peak_at: None | str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        jobs = self.jobs

        peak = self.peak

        projected = self.projected

        topic = self.topic

        peak_at: None | str | Unset
        if isinstance(self.peak_at, Unset):
            peak_at = UNSET
        else:
            peak_at = self.peak_at


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "jobs": jobs,
            "peak": peak,
            "projected": projected,
            "topic": topic,
        })
        if peak_at is not UNSET:
            field_dict["peak_at"] = peak_at

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        jobs = d.pop("jobs")

        peak = d.pop("peak")

        projected = d.pop("projected")

        topic = d.pop("topic")

        def _parse_peak_at(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        peak_at = _parse_peak_at(d.pop("peak_at", UNSET))


        forecast_topic = cls(
            jobs=jobs,
            peak=peak,
            projected=projected,
            topic=topic,
            peak_at=peak_at,
        )


        forecast_topic.additional_properties = d
        return forecast_topic

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
