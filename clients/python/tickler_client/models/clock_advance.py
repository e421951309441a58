from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset







T = TypeVar("T", bound="ClockAdvance")



@_attrs_define
class ClockAdvance:
    """ Body of `POST /v1/dev/clock`.

        Attributes:
            advance_ms (int): How far to move the clock forward, in ms (1 to ten years).
     """

    advance_ms: int





    def to_dict(self) -> dict[str, Any]:
        advance_ms = self.advance_ms


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "advance_ms": advance_ms,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        advance_ms = d.pop("advance_ms")

        clock_advance = cls(
            advance_ms=advance_ms,
        )

        return clock_advance

