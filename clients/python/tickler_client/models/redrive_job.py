from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast






T = TypeVar("T", bound="RedriveJob")



@_attrs_define
class RedriveJob:
    """ Body of `POST /v1/jobs/{id}/redrive`; all optional.

        Attributes:
            delay_ms (int | None | Unset):
            max_attempts (int | None | Unset): Attempts the job gets from now; default: its topic's `max_attempts`.
            run_at (None | str | Unset):
     """

    delay_ms: int | None | Unset = UNSET
    max_attempts: int | None | Unset = UNSET
    run_at: None | str | Unset = UNSET





    def to_dict(self) -> dict[str, Any]:
        delay_ms: int | None | Unset
        if isinstance(self.delay_ms, Unset):
            delay_ms = UNSET
        else:
            delay_ms = self.delay_ms

        max_attempts: int | None | Unset
        if isinstance(self.max_attempts, Unset):
            max_attempts = UNSET
        else:
            max_attempts = self.max_attempts

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
        if max_attempts is not UNSET:
            field_dict["max_attempts"] = max_attempts
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


        def _parse_max_attempts(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        max_attempts = _parse_max_attempts(d.pop("max_attempts", UNSET))


        def _parse_run_at(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        run_at = _parse_run_at(d.pop("run_at", UNSET))


        redrive_job = cls(
            delay_ms=delay_ms,
            max_attempts=max_attempts,
            run_at=run_at,
        )

        return redrive_job

