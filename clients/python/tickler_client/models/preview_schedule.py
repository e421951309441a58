from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast






T = TypeVar("T", bound="PreviewSchedule")



@_attrs_define
class PreviewSchedule:
    """ Body of `POST /v1/schedules/preview`: a timing to try, without storing
    anything.

        Attributes:
            after (None | str | Unset): Occurrences after this time (default now).
            count (int | None | Unset): How many (default 10, at most 100).
            cron (None | str | Unset):
            end_at (None | str | Unset):
            every_ms (int | None | Unset):
            start_at (None | str | Unset):
            time_zone (None | str | Unset):
     """

    after: None | str | Unset = UNSET
    count: int | None | Unset = UNSET
    cron: None | str | Unset = UNSET
    end_at: None | str | Unset = UNSET
    every_ms: int | None | Unset = UNSET
    start_at: None | str | Unset = UNSET
    time_zone: None | str | Unset = UNSET





    def to_dict(self) -> dict[str, Any]:
        after: None | str | Unset
        if isinstance(self.after, Unset):
            after = UNSET
        else:
            after = self.after

        count: int | None | Unset
        if isinstance(self.count, Unset):
            count = UNSET
        else:
            count = self.count

        cron: None | str | Unset
        if isinstance(self.cron, Unset):
            cron = UNSET
        else:
            cron = self.cron

        end_at: None | str | Unset
        if isinstance(self.end_at, Unset):
            end_at = UNSET
        else:
            end_at = self.end_at

        every_ms: int | None | Unset
        if isinstance(self.every_ms, Unset):
            every_ms = UNSET
        else:
            every_ms = self.every_ms

        start_at: None | str | Unset
        if isinstance(self.start_at, Unset):
            start_at = UNSET
        else:
            start_at = self.start_at

        time_zone: None | str | Unset
        if isinstance(self.time_zone, Unset):
            time_zone = UNSET
        else:
            time_zone = self.time_zone


        field_dict: dict[str, Any] = {}

        field_dict.update({
        })
        if after is not UNSET:
            field_dict["after"] = after
        if count is not UNSET:
            field_dict["count"] = count
        if cron is not UNSET:
            field_dict["cron"] = cron
        if end_at is not UNSET:
            field_dict["end_at"] = end_at
        if every_ms is not UNSET:
            field_dict["every_ms"] = every_ms
        if start_at is not UNSET:
            field_dict["start_at"] = start_at
        if time_zone is not UNSET:
            field_dict["time_zone"] = time_zone

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        def _parse_after(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        after = _parse_after(d.pop("after", UNSET))


        def _parse_count(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        count = _parse_count(d.pop("count", UNSET))


        def _parse_cron(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        cron = _parse_cron(d.pop("cron", UNSET))


        def _parse_end_at(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        end_at = _parse_end_at(d.pop("end_at", UNSET))


        def _parse_every_ms(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        every_ms = _parse_every_ms(d.pop("every_ms", UNSET))


        def _parse_start_at(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        start_at = _parse_start_at(d.pop("start_at", UNSET))


        def _parse_time_zone(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        time_zone = _parse_time_zone(d.pop("time_zone", UNSET))


        preview_schedule = cls(
            after=after,
            count=count,
            cron=cron,
            end_at=end_at,
            every_ms=every_ms,
            start_at=start_at,
            time_zone=time_zone,
        )

        return preview_schedule

