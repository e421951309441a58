from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast






T = TypeVar("T", bound="BackfillAnswer")



@_attrs_define
class BackfillAnswer:
    """ Answer of `POST /v1/schedules/{id}/backfill`.

        Attributes:
            created (int): Occurrences created (with `dry_run`: that would be).
            dry_run (bool): Whether nothing was written (a preview).
            existing (int): Occurrences whose job exists already (any status): left alone.
            expected (int): Occurrences the timing gives in the interval.
            from_ (str):
            preview (list[str]): The first 100 instants of `created`, in order.
            schedule_id (int):
            to (str):
     """

    created: int
    dry_run: bool
    existing: int
    expected: int
    from_: str
    preview: list[str]
    schedule_id: int
    to: str
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        created = self.created

        dry_run = self.dry_run

        existing = self.existing

        expected = self.expected

        from_ = self.from_

        preview = self.preview



        schedule_id = self.schedule_id

        to = self.to


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "created": created,
            "dry_run": dry_run,
            "existing": existing,
            "expected": expected,
            "from": from_,
            "preview": preview,
            "schedule_id": schedule_id,
            "to": to,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        created = d.pop("created")

        dry_run = d.pop("dry_run")

        existing = d.pop("existing")

        expected = d.pop("expected")

        from_ = d.pop("from")

        preview = cast(list[str], d.pop("preview"))


        schedule_id = d.pop("schedule_id")

        to = d.pop("to")

        backfill_answer = cls(
            created=created,
            dry_run=dry_run,
            existing=existing,
            expected=expected,
            from_=from_,
            preview=preview,
            schedule_id=schedule_id,
            to=to,
        )


        backfill_answer.additional_properties = d
        return backfill_answer

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
