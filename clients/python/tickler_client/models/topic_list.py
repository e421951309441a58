from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast

if TYPE_CHECKING:
  from ..models.topic_view import TopicView





T = TypeVar("T", bound="TopicList")



@_attrs_define
class TopicList:
    """ Answer of `GET /v1/topics`.

        Attributes:
            topics (list[TopicView]): Every topic that is paused, paced, grouped or has a payload schema
                (through the API or the configuration).
     """

    topics: list[TopicView]
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.topic_view import TopicView # noqa: PLC0415
        topics = []
        for topics_item_data in self.topics:
            topics_item = topics_item_data.to_dict()
            topics.append(topics_item)




        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "topics": topics,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.topic_view import TopicView # noqa: PLC0415
        d = dict(src_dict)
        topics = []
        _topics = d.pop("topics")
        for topics_item_data in (_topics):
            topics_item = TopicView.from_dict(topics_item_data)



            topics.append(topics_item)


        topic_list = cls(
            topics=topics,
        )


        topic_list.additional_properties = d
        return topic_list

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
