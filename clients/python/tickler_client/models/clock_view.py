from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset







T = TypeVar("T", bound="ClockView")



@_attrs_define
class ClockView:
    """ The virtual clock.

        Attributes:
            now (str): tickler's now: the database's clock plus `offset_ms`, as MySQL
                reads it.
            offset_ms (int): How far the clock has been moved since `tickler dev` started.
     """

    now: str
    offset_ms: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        now = self.now

        offset_ms = self.offset_ms


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "now": now,
            "offset_ms": offset_ms,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        now = d.pop("now")

        offset_ms = d.pop("offset_ms")

        clock_view = cls(
            now=now,
            offset_ms=offset_ms,
        )


        clock_view.additional_properties = d
        return clock_view

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
