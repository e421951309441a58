from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.bulk_action_type_6_type import BulkActionType6Type
from ..types import UNSET, Unset






T = TypeVar("T", bound="BulkActionType6")



@_attrs_define
class BulkActionType6:
    """ Held pending jobs (`held_at`, see `store::holds`) are let go, as
    `POST /v1/jobs/{id}/release` does one: due again at their time. By
    default each payload is checked against its topic's schema in force
    now, and one still failing stays held (a conflict); with `force` it
    is released unchecked, and its current attempt is sent as it is
    (`schema_waived_attempt`). A job not held is skipped.

        Attributes:
            type_ (BulkActionType6Type):
            force (bool | Unset):
     """

    type_: BulkActionType6Type
    force: bool | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        type_ = self.type_.value

        force = self.force


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "type": type_,
        })
        if force is not UNSET:
            field_dict["force"] = force

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        type_ = BulkActionType6Type(d.pop("type"))




        force = d.pop("force", UNSET)

        bulk_action_type_6 = cls(
            type_=type_,
            force=force,
        )


        bulk_action_type_6.additional_properties = d
        return bulk_action_type_6

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
