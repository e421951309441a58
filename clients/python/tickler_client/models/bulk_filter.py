from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.status import Status
from ..types import UNSET, Unset
from typing import cast
import datetime






T = TypeVar("T", bound="BulkFilter")



@_attrs_define
class BulkFilter:
    """ Which jobs an operation covers. Every field narrows; the API requires at
    least one besides `topic_patterns`.

        Attributes:
            held (bool | None | Unset): `true`: only pending jobs held by their topic's payload schema;
                `false`: only pending jobs not held. Either way pending jobs only:
                a hold means nothing in another status.
            ids (list[int] | None | Unset):
            key_prefix (None | str | Unset):
            run_at_from (datetime.datetime | None | Unset): Due at or after.
            run_at_to (datetime.datetime | None | Unset): Due before.
            status (None | Status | Unset):
            topic (None | str | Unset):
            topic_patterns (list[str] | None | Unset): The topics the caller's token may touch (`None`: all), kept with
                the operation so a resumed one stays within them.
     """

    held: bool | None | Unset = UNSET
    ids: list[int] | None | Unset = UNSET
    key_prefix: None | str | Unset = UNSET
    run_at_from: datetime.datetime | None | Unset = UNSET
    run_at_to: datetime.datetime | None | Unset = UNSET
    status: None | Status | Unset = UNSET
    topic: None | str | Unset = UNSET
    topic_patterns: list[str] | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





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
        elif isinstance(self.run_at_from, datetime.datetime):
            run_at_from = self.run_at_from.isoformat()
        else:
            run_at_from = self.run_at_from

        run_at_to: None | str | Unset
        if isinstance(self.run_at_to, Unset):
            run_at_to = UNSET
        elif isinstance(self.run_at_to, datetime.datetime):
            run_at_to = self.run_at_to.isoformat()
        else:
            run_at_to = self.run_at_to

        status: None | str | Unset
        if isinstance(self.status, Unset):
            status = UNSET
        elif isinstance(self.status, Status):
            status = self.status.value
        else:
            status = self.status

        topic: None | str | Unset
        if isinstance(self.topic, Unset):
            topic = UNSET
        else:
            topic = self.topic

        topic_patterns: list[str] | None | Unset
        if isinstance(self.topic_patterns, Unset):
            topic_patterns = UNSET
        elif isinstance(self.topic_patterns, list):
            topic_patterns = self.topic_patterns


        else:
            topic_patterns = self.topic_patterns


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
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
        if topic_patterns is not UNSET:
            field_dict["topic_patterns"] = topic_patterns

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


        def _parse_run_at_from(data: object) -> datetime.datetime | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                run_at_from_type_0 = datetime.datetime.fromisoformat(data)



                return run_at_from_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None | Unset, data)

        run_at_from = _parse_run_at_from(d.pop("run_at_from", UNSET))


        def _parse_run_at_to(data: object) -> datetime.datetime | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                run_at_to_type_0 = datetime.datetime.fromisoformat(data)



                return run_at_to_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None | Unset, data)

        run_at_to = _parse_run_at_to(d.pop("run_at_to", UNSET))


        def _parse_status(data: object) -> None | Status | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                status_type_1 = Status(data)



                return status_type_1
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | Status | Unset, data)

        status = _parse_status(d.pop("status", UNSET))


        def _parse_topic(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        topic = _parse_topic(d.pop("topic", UNSET))


        def _parse_topic_patterns(data: object) -> list[str] | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, list):
                    raise TypeError()
                topic_patterns_type_0 = cast(list[str], data)

                return topic_patterns_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(list[str] | None | Unset, data)

        topic_patterns = _parse_topic_patterns(d.pop("topic_patterns", UNSET))


        bulk_filter = cls(
            held=held,
            ids=ids,
            key_prefix=key_prefix,
            run_at_from=run_at_from,
            run_at_to=run_at_to,
            status=status,
            topic=topic,
            topic_patterns=topic_patterns,
        )


        bulk_filter.additional_properties = d
        return bulk_filter

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
