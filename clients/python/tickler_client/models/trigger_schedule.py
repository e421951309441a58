from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast






T = TypeVar("T", bound="TriggerSchedule")



@_attrs_define
class TriggerSchedule:
    """ Body of `POST /v1/schedules/{id}/trigger`; all optional.

        Attributes:
            delay_ms (int | None | Unset): Or after this many milliseconds.
            key (None | str | Unset): The job's key, which makes the trigger idempotent: sent again, the
                same job is answered (200). Not of an occurrence's form
                (`…@<instant>`). Default: a fresh `<schedule key>@trigger-<hex>`.
            run_at (None | str | Unset): When it runs, RFC 3339 (default: now).
     """

    delay_ms: int | None | Unset = UNSET
    key: None | str | Unset = UNSET
    run_at: None | str | Unset = UNSET





    def to_dict(self) -> dict[str, Any]:
        delay_ms: int | None | Unset
        if isinstance(self.delay_ms, Unset):
            delay_ms = UNSET
        else:
            delay_ms = self.delay_ms

        key: None | str | Unset
        if isinstance(self.key, Unset):
            key = UNSET
        else:
            key = self.key

        run_at: None | str | Unset
        if isinstance(self.run_at, Unset):
            run_at = UNSET
        else:
            run_at = self.run_at


        field_dict: dict[str, Any] = {}

        field_dict.update({
        })
        if delay_ms is not UNSET:
            field_dict["delay_ms"] = delay_ms
        if key is not UNSET:
            field_dict["key"] = key
        if run_at is not UNSET:
            field_dict["run_at"] = run_at

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        def _parse_delay_ms(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        delay_ms = _parse_delay_ms(d.pop("delay_ms", UNSET))


        def _parse_key(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        key = _parse_key(d.pop("key", UNSET))


        def _parse_run_at(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        run_at = _parse_run_at(d.pop("run_at", UNSET))


        trigger_schedule = cls(
            delay_ms=delay_ms,
            key=key,
            run_at=run_at,
        )

        return trigger_schedule

