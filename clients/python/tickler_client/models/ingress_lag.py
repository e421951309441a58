from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast






T = TypeVar("T", bound="IngressLag")



@_attrs_define
class IngressLag:
    """ The ingress group's lag on one request topic.

        Attributes:
            topic (str):
            lag (int | None | Unset): Null when it could not be read.
     """

    topic: str
    lag: int | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        topic = self.topic

        lag: int | None | Unset
        if isinstance(self.lag, Unset):
            lag = UNSET
        else:
            lag = self.lag


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "topic": topic,
        })
        if lag is not UNSET:
            field_dict["lag"] = lag

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        topic = d.pop("topic")

        def _parse_lag(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        lag = _parse_lag(d.pop("lag", UNSET))


        ingress_lag = cls(
            topic=topic,
            lag=lag,
        )


        ingress_lag.additional_properties = d
        return ingress_lag

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
