from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.bulk_action_type_3_type import BulkActionType3Type
from ..types import UNSET, Unset
from typing import cast






T = TypeVar("T", bound="BulkActionType3")



@_attrs_define
class BulkActionType3:
    """ Dead jobs go back to pending, due now, with `max_attempts` more
    attempts (default: their topic's `max_attempts`).

        Attributes:
            type_ (BulkActionType3Type):
            max_attempts (int | None | Unset):
     """

    type_: BulkActionType3Type
    max_attempts: int | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        type_ = self.type_.value

        max_attempts: int | None | Unset
        if isinstance(self.max_attempts, Unset):
            max_attempts = UNSET
        else:
            max_attempts = self.max_attempts


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "type": type_,
        })
        if max_attempts is not UNSET:
            field_dict["max_attempts"] = max_attempts

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        type_ = BulkActionType3Type(d.pop("type"))




        def _parse_max_attempts(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        max_attempts = _parse_max_attempts(d.pop("max_attempts", UNSET))


        bulk_action_type_3 = cls(
            type_=type_,
            max_attempts=max_attempts,
        )


        bulk_action_type_3.additional_properties = d
        return bulk_action_type_3

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
