from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast






T = TypeVar("T", bound="HistoryEvent")



@_attrs_define
class HistoryEvent:
    """ 
        Attributes:
            actor (str): `api:NAME`, `dispatcher`, `reconciler`, `results`, `bulk:ID`, or
                `sql` for changes made by hand.
            at (str):
            attempt (int):
            run_at (str):
            status (str):
            topic_from (None | str | Unset): A retarget's: the topic the change moved the job from, and to.
            topic_to (None | str | Unset):
     """

    actor: str
    at: str
    attempt: int
    run_at: str
    status: str
    topic_from: None | str | Unset = UNSET
    topic_to: None | str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        actor = self.actor

        at = self.at

        attempt = self.attempt

        run_at = self.run_at

        status = self.status

        topic_from: None | str | Unset
        if isinstance(self.topic_from, Unset):
            topic_from = UNSET
        else:
            topic_from = self.topic_from

        topic_to: None | str | Unset
        if isinstance(self.topic_to, Unset):
            topic_to = UNSET
        else:
            topic_to = self.topic_to


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "actor": actor,
            "at": at,
            "attempt": attempt,
            "run_at": run_at,
            "status": status,
        })
        if topic_from is not UNSET:
            field_dict["topic_from"] = topic_from
        if topic_to is not UNSET:
            field_dict["topic_to"] = topic_to

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        actor = d.pop("actor")

        at = d.pop("at")

        attempt = d.pop("attempt")

        run_at = d.pop("run_at")

        status = d.pop("status")

        def _parse_topic_from(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        topic_from = _parse_topic_from(d.pop("topic_from", UNSET))


        def _parse_topic_to(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        topic_to = _parse_topic_to(d.pop("topic_to", UNSET))


        history_event = cls(
            actor=actor,
            at=at,
            attempt=attempt,
            run_at=run_at,
            status=status,
            topic_from=topic_from,
            topic_to=topic_to,
        )


        history_event.additional_properties = d
        return history_event

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
