from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast






T = TypeVar("T", bound="FilterBody")



@_attrs_define
class FilterBody:
    """ The filter as a request gives it.

        Attributes:
            held (bool | None | Unset): `true`: only pending jobs held by their topic's payload schema;
                `false`: only pending jobs not held.
            ids (list[int] | None | Unset):
            key_prefix (None | str | Unset):
            run_at_from (None | str | Unset):
            run_at_to (None | str | Unset):
            status (None | str | Unset):
            topic (None | str | Unset):
     """

    held: bool | None | Unset = UNSET
    ids: list[int] | None | Unset = UNSET
    key_prefix: None | str | Unset = UNSET
    run_at_from: None | str | Unset = UNSET
    run_at_to: None | str | Unset = UNSET
    status: None | str | Unset = UNSET
    topic: None | str | Unset = UNSET





    def to_dict(self) -> dict[str, Any]:
        held: bool | None | Unset
        if isinstance(self.held, Unset):
            held = UNSET
        else:
            held = self.held

        ids: list[int] | None | Unset
        if isinstance(self.ids, Unset):
            ids = UNSET
        elif isinstance(self.ids, list):
            ids = self.ids


        else:
            ids = self.ids

        key_prefix: None | str | Unset
        if isinstance(self.key_prefix, Unset):
            key_prefix = UNSET
        else:
            key_prefix = self.key_prefix

        run_at_from: None | str | Unset
        if isinstance(self.run_at_from, Unset):
            run_at_from = UNSET
        else:
            run_at_from = self.run_at_from

        run_at_to: None | str | Unset
        if isinstance(self.run_at_to, Unset):
            run_at_to = UNSET
        else:
            run_at_to = self.run_at_to

        status: None | str | Unset
        if isinstance(self.status, Unset):
            status = UNSET
        else:
            status = self.status

        topic: None | str | Unset
        if isinstance(self.topic, Unset):
            topic = UNSET
        else:
            topic = self.topic


        field_dict: dict[str, Any] = {}

        field_dict.update({
        })
        if held is not UNSET:
            field_dict["held"] = held
        if ids is not UNSET:
            field_dict["ids"] = ids
        if key_prefix is not UNSET:
            field_dict["key_prefix"] = key_prefix
        if run_at_from is not UNSET:
            field_dict["run_at_from"] = run_at_from
        if run_at_to is not UNSET:
            field_dict["run_at_to"] = run_at_to
        if status is not UNSET:
            field_dict["status"] = status
        if topic is not UNSET:
            field_dict["topic"] = topic

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        def _parse_held(data: object) -> bool | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(bool | None | Unset, data)

        held = _parse_held(d.pop("held", UNSET))


        def _parse_ids(data: object) -> list[int] | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, list):
                    raise TypeError()
                ids_type_0 = cast(list[int], data)

                return ids_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(list[int] | None | Unset, data)

        ids = _parse_ids(d.pop("ids", UNSET))


        def _parse_key_prefix(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        key_prefix = _parse_key_prefix(d.pop("key_prefix", UNSET))


        def _parse_run_at_from(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        run_at_from = _parse_run_at_from(d.pop("run_at_from", UNSET))


        def _parse_run_at_to(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        run_at_to = _parse_run_at_to(d.pop("run_at_to", UNSET))


        def _parse_status(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        status = _parse_status(d.pop("status", UNSET))


        def _parse_topic(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        topic = _parse_topic(d.pop("topic", UNSET))


        filter_body = cls(
            held=held,
            ids=ids,
            key_prefix=key_prefix,
            run_at_from=run_at_from,
            run_at_to=run_at_to,
            status=status,
            topic=topic,
        )

        return filter_body

