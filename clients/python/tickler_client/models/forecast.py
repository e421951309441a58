from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast

if TYPE_CHECKING:
  from ..models.forecast_bucket import ForecastBucket
  from ..models.forecast_topic import ForecastTopic





T = TypeVar("T", bound="Forecast")



@_attrs_define
class Forecast:
    """ The answer of `GET /v1/forecast`.

        Attributes:
            at (str): The database's clock when it was read.
            bucket_ms (int):
            buckets (list[ForecastBucket]): Every bucket of the range, in order (the last may end past `to`;
                it counts only what is due before `to`).
            from_ (str):
            projected_complete (bool): False when a cron schedule fires so often in the range that its
                projection stopped short (after 100,000 occurrences).
            to (str):
            topics (list[ForecastTopic]): The range's totals by topic, the busiest first.
     """

    at: str
    bucket_ms: int
    buckets: list[ForecastBucket]
    from_: str
    projected_complete: bool
    to: str
    topics: list[ForecastTopic]
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.forecast_bucket import ForecastBucket # noqa: PLC0415
        from ..models.forecast_topic import ForecastTopic # noqa: PLC0415
        at = self.at

        bucket_ms = self.bucket_ms

        buckets = []
        for buckets_item_data in self.buckets:
            buckets_item = buckets_item_data.to_dict()
            buckets.append(buckets_item)



        from_ = self.from_

        projected_complete = self.projected_complete

        to = self.to

        topics = []
        for topics_item_data in self.topics:
            topics_item = topics_item_data.to_dict()
            topics.append(topics_item)




        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "at": at,
            "bucket_ms": bucket_ms,
            "buckets": buckets,
            "from": from_,
            "projected_complete": projected_complete,
            "to": to,
            "topics": topics,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.forecast_bucket import ForecastBucket # noqa: PLC0415
        from ..models.forecast_topic import ForecastTopic # noqa: PLC0415
        d = dict(src_dict)
        at = d.pop("at")

        bucket_ms = d.pop("bucket_ms")

        buckets = []
        _buckets = d.pop("buckets")
        for buckets_item_data in (_buckets):
            buckets_item = ForecastBucket.from_dict(buckets_item_data)



            buckets.append(buckets_item)


        from_ = d.pop("from")

        projected_complete = d.pop("projected_complete")

        to = d.pop("to")

        topics = []
        _topics = d.pop("topics")
        for topics_item_data in (_topics):
            topics_item = ForecastTopic.from_dict(topics_item_data)



            topics.append(topics_item)


        forecast = cls(
            at=at,
            bucket_ms=bucket_ms,
            buckets=buckets,
            from_=from_,
            projected_complete=projected_complete,
            to=to,
            topics=topics,
        )


        forecast.additional_properties = d
        return forecast

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
