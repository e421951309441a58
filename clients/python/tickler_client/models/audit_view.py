from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast






T = TypeVar("T", bound="AuditView")



@_attrs_define
class AuditView:
    """ One change.

        Attributes:
            action (str):
            actor (str):
            at (str): When it was asked (the database's clock).
            id (int):
            after (Any | Unset): The answer: the state after, or the error (payloads left out).
            before (Any | Unset): The state before, as `GET` showed it (payloads left out).
            origin (None | str | Unset):
            request (Any | Unset): The request's body (payloads left out).
            status (int | None | Unset): The answer's HTTP status (0: a CLI change that failed); null: its
                end was not recorded (the process died): it may have happened.
            target (None | str | Unset):
     """

    action: str
    actor: str
    at: str
    id: int
    after: Any | Unset = UNSET
    before: Any | Unset = UNSET
    origin: None | str | Unset = UNSET
    request: Any | Unset = UNSET
    status: int | None | Unset = UNSET
    target: None | str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        action = self.action

        actor = self.actor

        at = self.at

        id = self.id

        after = self.after

        before = self.before

        origin: None | str | Unset
        if isinstance(self.origin, Unset):
            origin = UNSET
        else:
            origin = self.origin

        request = self.request

        status: int | None | Unset
        if isinstance(self.status, Unset):
            status = UNSET
        else:
            status = self.status

        target: None | str | Unset
        if isinstance(self.target, Unset):
            target = UNSET
        else:
            target = self.target


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "action": action,
            "actor": actor,
            "at": at,
            "id": id,
        })
        if after is not UNSET:
            field_dict["after"] = after
        if before is not UNSET:
            field_dict["before"] = before
        if origin is not UNSET:
            field_dict["origin"] = origin
        if request is not UNSET:
            field_dict["request"] = request
        if status is not UNSET:
            field_dict["status"] = status
        if target is not UNSET:
            field_dict["target"] = target

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        action = d.pop("action")

        actor = d.pop("actor")

        at = d.pop("at")

        id = d.pop("id")

        after = d.pop("after", UNSET)

        before = d.pop("before", UNSET)

        def _parse_origin(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        origin = _parse_origin(d.pop("origin", UNSET))


        request = d.pop("request", UNSET)

        def _parse_status(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        status = _parse_status(d.pop("status", UNSET))


        def _parse_target(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        target = _parse_target(d.pop("target", UNSET))


        audit_view = cls(
            action=action,
            actor=actor,
            at=at,
            id=id,
            after=after,
            before=before,
            origin=origin,
            request=request,
            status=status,
            target=target,
        )


        audit_view.additional_properties = d
        return audit_view

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
