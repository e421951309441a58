from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.bulk_action_type_5_type import BulkActionType5Type






T = TypeVar("T", bound="BulkActionType5")



@_attrs_define
class BulkActionType5:
    """ Pending jobs move to another Kafka topic, keeping their id, key,
    payload, time and attempt. A job whose key a job on `topic` holds
    already stays where it is (a conflict: one job per (topic, key));
    a schedule's occurrence stays with its schedule (skipped).

        Attributes:
            topic (str):
            type_ (BulkActionType5Type):
     """

    topic: str
    type_: BulkActionType5Type
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        topic = self.topic

        type_ = self.type_.value


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "topic": topic,
            "type": type_,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        topic = d.pop("topic")

        type_ = BulkActionType5Type(d.pop("type"))




        bulk_action_type_5 = cls(
            topic=topic,
            type_=type_,
        )


        bulk_action_type_5.additional_properties = d
        return bulk_action_type_5

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
