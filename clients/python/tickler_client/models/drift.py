from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast






T = TypeVar("T", bound="Drift")



@_attrs_define
class Drift:
    """ What the Redis index should hold by MySQL, what it holds, and the
    difference (positive: Redis lacks jobs). A few in transit is normal.

        Attributes:
            mysql (int):
            drift (int | None | Unset):
            redis (int | None | Unset):
     """

    mysql: int
    drift: int | None | Unset = UNSET
    redis: int | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        mysql = self.mysql

        drift: int | None | Unset
        if isinstance(self.drift, Unset):
            drift = UNSET
        else:
            drift = self.drift

        redis: int | None | Unset
        if isinstance(self.redis, Unset):
            redis = UNSET
        else:
            redis = self.redis


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "mysql": mysql,
        })
        if drift is not UNSET:
            field_dict["drift"] = drift
        if redis is not UNSET:
            field_dict["redis"] = redis

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        mysql = d.pop("mysql")

        def _parse_drift(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        drift = _parse_drift(d.pop("drift", UNSET))


        def _parse_redis(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        redis = _parse_redis(d.pop("redis", UNSET))


        drift = cls(
            mysql=mysql,
            drift=drift,
            redis=redis,
        )


        drift.additional_properties = d
        return drift

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
