from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast

if TYPE_CHECKING:
  from ..models.patch_topic_payload_schema_type_0 import PatchTopicPayloadSchemaType0





T = TypeVar("T", bound="PatchTopic")



@_attrs_define
class PatchTopic:
    """ Body of `PATCH /v1/topics/{topic}`.

        Attributes:
            group_by (None | str | Unset): Groups the topic's jobs for fair dispatch: `key:SEP` (the key up to
                the first SEP, e.g. `key::`) or `header:NAME` (that header's value,
                e.g. `header:tenant`); null removes the API's grouping.
            group_max_per_second (int | None | Unset): Each group's pace, jobs per second across every instance, at least
                1; null removes it.
            max_per_second (int | None | Unset): Jobs per second across every instance, at least 1; null removes
                the API's pace (the configuration's applies again).
            payload_schema (None | PatchTopicPayloadSchemaType0 | Unset): A JSON Schema the topic's payloads must match from
                now on: creates
                that do not are refused (400 `payload_schema`), and pending jobs that
                no longer do are held when due. One that does not compile: 400
                `invalid_schema`. null removes it.
     """

    group_by: None | str | Unset = UNSET
    group_max_per_second: int | None | Unset = UNSET
    max_per_second: int | None | Unset = UNSET
    payload_schema: None | PatchTopicPayloadSchemaType0 | Unset = UNSET





    def to_dict(self) -> dict[str, Any]:
        from ..models.patch_topic_payload_schema_type_0 import PatchTopicPayloadSchemaType0 # noqa: PLC0415
        group_by: None | str | Unset
        if isinstance(self.group_by, Unset):
            group_by = UNSET
        else:
            group_by = self.group_by

        group_max_per_second: int | None | Unset
        if isinstance(self.group_max_per_second, Unset):
            group_max_per_second = UNSET
        else:
            group_max_per_second = self.group_max_per_second

        max_per_second: int | None | Unset
        if isinstance(self.max_per_second, Unset):
            max_per_second = UNSET
        else:
            max_per_second = self.max_per_second

        payload_schema: dict[str, Any] | None | Unset
        if isinstance(self.payload_schema, Unset):
            payload_schema = UNSET
        elif isinstance(self.payload_schema, PatchTopicPayloadSchemaType0):
            payload_schema = self.payload_schema.to_dict()
        else:
            payload_schema = self.payload_schema


        field_dict: dict[str, Any] = {}

        field_dict.update({
        })
        if group_by is not UNSET:
            field_dict["group_by"] = group_by
        if group_max_per_second is not UNSET:
            field_dict["group_max_per_second"] = group_max_per_second
        if max_per_second is not UNSET:
            field_dict["max_per_second"] = max_per_second
        if payload_schema is not UNSET:
            field_dict["payload_schema"] = payload_schema

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.patch_topic_payload_schema_type_0 import PatchTopicPayloadSchemaType0 # noqa: PLC0415
        d = dict(src_dict)
        def _parse_group_by(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        group_by = _parse_group_by(d.pop("group_by", UNSET))


        def _parse_group_max_per_second(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        group_max_per_second = _parse_group_max_per_second(d.pop("group_max_per_second", UNSET))


        def _parse_max_per_second(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        max_per_second = _parse_max_per_second(d.pop("max_per_second", UNSET))


        def _parse_payload_schema(data: object) -> None | PatchTopicPayloadSchemaType0 | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                payload_schema_type_0 = PatchTopicPayloadSchemaType0.from_dict(data)



                return payload_schema_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | PatchTopicPayloadSchemaType0 | Unset, data)

        payload_schema = _parse_payload_schema(d.pop("payload_schema", UNSET))


        patch_topic = cls(
            group_by=group_by,
            group_max_per_second=group_max_per_second,
            max_per_second=max_per_second,
            payload_schema=payload_schema,
        )

        return patch_topic

