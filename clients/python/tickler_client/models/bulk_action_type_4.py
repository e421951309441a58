from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.bulk_action_type_4_type import BulkActionType4Type
from ..types import UNSET, Unset
from typing import cast






T = TypeVar("T", bound="BulkActionType4")



@_attrs_define
class BulkActionType4:
    """ Pending jobs get a new result policy; what is left out is kept.

        Attributes:
            type_ (BulkActionType4Type):
            ack_timeout_ms (int | None | Unset):
            backoff_base_ms (int | None | Unset):
            backoff_cap_ms (int | None | Unset):
            expects_result (bool | None | Unset):
            max_attempts (int | None | Unset):
     """

    type_: BulkActionType4Type
    ack_timeout_ms: int | None | Unset = UNSET
    backoff_base_ms: int | None | Unset = UNSET
    backoff_cap_ms: int | None | Unset = UNSET
    expects_result: bool | None | Unset = UNSET
    max_attempts: int | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        type_ = self.type_.value

        ack_timeout_ms: int | None | Unset
        if isinstance(self.ack_timeout_ms, Unset):
            ack_timeout_ms = UNSET
        else:
            ack_timeout_ms = self.ack_timeout_ms

        backoff_base_ms: int | None | Unset
        if isinstance(self.backoff_base_ms, Unset):
            backoff_base_ms = UNSET
        else:
            backoff_base_ms = self.backoff_base_ms

        backoff_cap_ms: int | None | Unset
        if isinstance(self.backoff_cap_ms, Unset):
            backoff_cap_ms = UNSET
        else:
            backoff_cap_ms = self.backoff_cap_ms

        expects_result: bool | None | Unset
        if isinstance(self.expects_result, Unset):
            expects_result = UNSET
        else:
            expects_result = self.expects_result

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
        if ack_timeout_ms is not UNSET:
            field_dict["ack_timeout_ms"] = ack_timeout_ms
        if backoff_base_ms is not UNSET:
            field_dict["backoff_base_ms"] = backoff_base_ms
        if backoff_cap_ms is not UNSET:
            field_dict["backoff_cap_ms"] = backoff_cap_ms
        if expects_result is not UNSET:
            field_dict["expects_result"] = expects_result
        if max_attempts is not UNSET:
            field_dict["max_attempts"] = max_attempts

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        type_ = BulkActionType4Type(d.pop("type"))




        def _parse_ack_timeout_ms(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        ack_timeout_ms = _parse_ack_timeout_ms(d.pop("ack_timeout_ms", UNSET))


        def _parse_backoff_base_ms(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        backoff_base_ms = _parse_backoff_base_ms(d.pop("backoff_base_ms", UNSET))


        def _parse_backoff_cap_ms(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        backoff_cap_ms = _parse_backoff_cap_ms(d.pop("backoff_cap_ms", UNSET))


        def _parse_expects_result(data: object) -> bool | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(bool | None | Unset, data)

        expects_result = _parse_expects_result(d.pop("expects_result", UNSET))


        def _parse_max_attempts(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        max_attempts = _parse_max_attempts(d.pop("max_attempts", UNSET))


        bulk_action_type_4 = cls(
            type_=type_,
            ack_timeout_ms=ack_timeout_ms,
            backoff_base_ms=backoff_base_ms,
            backoff_cap_ms=backoff_cap_ms,
            expects_result=expects_result,
            max_attempts=max_attempts,
        )


        bulk_action_type_4.additional_properties = d
        return bulk_action_type_4

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
