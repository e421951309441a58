from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset







T = TypeVar("T", bound="ForecastBucket")



@_attrs_define
class ForecastBucket:
    """ 
        Attributes:
            at (str): When the bucket starts.
            jobs (int): Pending jobs due in it.
            projected (int): Occurrences schedules will create in it, not yet jobs.
     """

    at: str
    jobs: int
    projected: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        at = self.at

        jobs = self.jobs

        projected = self.projected


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "at": at,
            "jobs": jobs,
            "projected": projected,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        at = d.pop("at")

        jobs = d.pop("jobs")

        projected = d.pop("projected")

        forecast_bucket = cls(
            at=at,
            jobs=jobs,
            projected=projected,
        )


        forecast_bucket.additional_properties = d
        return forecast_bucket

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
