from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast

if TYPE_CHECKING:
  from ..models.topic_view_payload_schema_type_0 import TopicViewPayloadSchemaType0





T = TypeVar("T", bound="TopicView")



@_attrs_define
class TopicView:
    """ A topic's controls.

        Attributes:
            paused (bool): Due jobs stay pending while paused, and are produced after resume.
            topic (str):
            group_by (None | str | Unset): What the topic's jobs are grouped by for fair dispatch (`key:SEP`,
                `header:NAME`; null: not grouped), the API's or the configuration's.
            group_max_per_second (int | None | Unset): Each group's pace, jobs per second across every instance (null:
                none, the groups only share `max_per_second` fairly).
            max_per_second (int | None | Unset): The pace in force, jobs per second (null: none).
            max_per_second_source (None | str | Unset): Where the pace comes from: `api` (PATCH), `config`
                (`topics.<name>.max_per_second`) or null.
            payload_schema (None | TopicViewPayloadSchemaType0 | Unset): The JSON Schema the topic's payloads must match
                (null: none),
                checked on create and again right before each job is produced
                (docs/api.md, "Payload schemas"). Stored text that is not JSON (a
                hand edit) is shown as a string.
            updated_at (None | str | Unset):
            updated_by (None | str | Unset): Who changed the controls last (`api:NAME`, or `sql`).
            watermark (None | str | Unset): The due-time watermark: every job of the topic due at or before it
                is produced, cancelled, expired or dead (null until one of its jobs
                has fallen due). Shown by `GET /v1/topics/{topic}`.
     """

    paused: bool
    topic: str
    group_by: None | str | Unset = UNSET
    group_max_per_second: int | None | Unset = UNSET
    max_per_second: int | None | Unset = UNSET
    max_per_second_source: None | str | Unset = UNSET
    payload_schema: None | TopicViewPayloadSchemaType0 | Unset = UNSET
    updated_at: None | str | Unset = UNSET
    updated_by: None | str | Unset = UNSET
    watermark: None | str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.topic_view_payload_schema_type_0 import TopicViewPayloadSchemaType0 # noqa: PLC0415
        paused = self.paused

        topic = self.topic

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

        max_per_second_source: None | str | Unset
        if isinstance(self.max_per_second_source, Unset):
            max_per_second_source = UNSET
        else:
            max_per_second_source = self.max_per_second_source

        payload_schema: dict[str, Any] | None | Unset
        if isinstance(self.payload_schema, Unset):
            payload_schema = UNSET
        elif isinstance(self.payload_schema, TopicViewPayloadSchemaType0):
            payload_schema = self.payload_schema.to_dict()
        else:
            payload_schema = self.payload_schema

        updated_at: None | str | Unset
        if isinstance(self.updated_at, Unset):
            updated_at = UNSET
        else:
            updated_at = self.updated_at

        updated_by: None | str | Unset
        if isinstance(self.updated_by, Unset):
            updated_by = UNSET
        else:
            updated_by = self.updated_by

        watermark: None | str | Unset
        if isinstance(self.watermark, Unset):
            watermark = UNSET
        else:
            watermark = self.watermark


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "paused": paused,
            "topic": topic,
        })
        if group_by is not UNSET:
            field_dict["group_by"] = group_by
        if group_max_per_second is not UNSET:
            field_dict["group_max_per_second"] = group_max_per_second
        if max_per_second is not UNSET:
            field_dict["max_per_second"] = max_per_second
        if max_per_second_source is not UNSET:
            field_dict["max_per_second_source"] = max_per_second_source
        if payload_schema is not UNSET:
            field_dict["payload_schema"] = payload_schema
        if updated_at is not UNSET:
            field_dict["updated_at"] = updated_at
        if updated_by is not UNSET:
            field_dict["updated_by"] = updated_by
        if watermark is not UNSET:
            field_dict["watermark"] = watermark

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.topic_view_payload_schema_type_0 import TopicViewPayloadSchemaType0 # noqa: PLC0415
        d = dict(src_dict)
        paused = d.pop("paused")

        topic = d.pop("topic")

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


        def _parse_max_per_second_source(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        max_per_second_source = _parse_max_per_second_source(d.pop("max_per_second_source", UNSET))


        def _parse_payload_schema(data: object) -> None | TopicViewPayloadSchemaType0 | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                payload_schema_type_0 = TopicViewPayloadSchemaType0.from_dict(data)



                return payload_schema_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | TopicViewPayloadSchemaType0 | Unset, data)

        payload_schema = _parse_payload_schema(d.pop("payload_schema", UNSET))


        def _parse_updated_at(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        updated_at = _parse_updated_at(d.pop("updated_at", UNSET))


        def _parse_updated_by(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        updated_by = _parse_updated_by(d.pop("updated_by", UNSET))


        def _parse_watermark(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        watermark = _parse_watermark(d.pop("watermark", UNSET))


        topic_view = cls(
            paused=paused,
            topic=topic,
            group_by=group_by,
            group_max_per_second=group_max_per_second,
            max_per_second=max_per_second,
            max_per_second_source=max_per_second_source,
            payload_schema=payload_schema,
            updated_at=updated_at,
            updated_by=updated_by,
            watermark=watermark,
        )


        topic_view.additional_properties = d
        return topic_view

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
