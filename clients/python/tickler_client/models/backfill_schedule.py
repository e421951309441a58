from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast






T = TypeVar("T", bound="BackfillSchedule")



@_attrs_define
class BackfillSchedule:
    """ Body of `POST /v1/schedules/{id}/backfill`.

        Attributes:
            dry_run (bool | None | Unset): `true` (the default): say what would be created, create nothing.
            from_ (None | str | Unset): Start, RFC 3339, inclusive.
            to (None | str | Unset): End, RFC 3339, exclusive; not after now.
     """

    dry_run: bool | None | Unset = UNSET
    from_: None | str | Unset = UNSET
    to: None | str | Unset = UNSET





    def to_dict(self) -> dict[str, Any]:
        dry_run: bool | None | Unset
        if isinstance(self.dry_run, Unset):
            dry_run = UNSET
        else:
            dry_run = self.dry_run

        from_: None | str | Unset
        if isinstance(self.from_, Unset):
            from_ = UNSET
        else:
            from_ = self.from_

        to: None | str | Unset
        if isinstance(self.to, Unset):
            to = UNSET
        else:
            to = self.to


        field_dict: dict[str, Any] = {}

        field_dict.update({
        })
        if dry_run is not UNSET:
            field_dict["dry_run"] = dry_run
        if from_ is not UNSET:
            field_dict["from"] = from_
        if to is not UNSET:
            field_dict["to"] = to

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        def _parse_dry_run(data: object) -> bool | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(bool | None | Unset, data)

        dry_run = _parse_dry_run(d.pop("dry_run", UNSET))


        def _parse_from_(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        from_ = _parse_from_(d.pop("from", UNSET))


        def _parse_to(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        to = _parse_to(d.pop("to", UNSET))


        backfill_schedule = cls(
            dry_run=dry_run,
            from_=from_,
            to=to,
        )

        return backfill_schedule

