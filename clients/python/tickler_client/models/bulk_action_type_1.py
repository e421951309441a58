from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.bulk_action_type_1_type import BulkActionType1Type






T = TypeVar("T", bound="BulkActionType1")



@_attrs_define
class BulkActionType1:
    """ Pending jobs move by `by_ms` (negative: earlier).

        Attributes:
            by_ms (int):
            type_ (BulkActionType1Type):
     """

    by_ms: int
    type_: BulkActionType1Type
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        by_ms = self.by_ms

        type_ = self.type_.value


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "by_ms": by_ms,
            "type": type_,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        by_ms = d.pop("by_ms")

        type_ = BulkActionType1Type(d.pop("type"))




        bulk_action_type_1 = cls(
            by_ms=by_ms,
            type_=type_,
        )


        bulk_action_type_1.additional_properties = d
        return bulk_action_type_1

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
