from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.status import Status
from ..types import UNSET, Unset
from typing import cast

if TYPE_CHECKING:
  from ..models.bulk_action_type_0 import BulkActionType0
  from ..models.bulk_action_type_1 import BulkActionType1
  from ..models.bulk_action_type_2 import BulkActionType2
  from ..models.bulk_action_type_3 import BulkActionType3
  from ..models.bulk_action_type_4 import BulkActionType4
  from ..models.bulk_action_type_5 import BulkActionType5
  from ..models.bulk_action_type_6 import BulkActionType6
  from ..models.job_view import JobView





T = TypeVar("T", bound="BulkPreview")



@_attrs_define
class BulkPreview:
    """ Answer of a preview (`dry_run: true`).

        Attributes:
            action (BulkActionType0 | BulkActionType1 | BulkActionType2 | BulkActionType3 | BulkActionType4 |
                BulkActionType5 | BulkActionType6): What an operation does to each job it covers. Every action applies to
                jobs in one status only ([`BulkAction::applies_to`]); a job that left
                that status before its batch is skipped, never forced.
            applies_to (Status): The `jobs.status` column. The words are part of the product: operators
                read and write them in SQL.
            dry_run (bool):
            eligible (int): Of those, the ones in `applies_to` now (a retarget's: those it
                would move, see [`BulkAction::Retarget`]; a release's: those held
                now, whose payloads are checked only when it runs).
            matched (int): Jobs the filter matches.
            sample (list[JobView]): The first 20 by id, without payloads.
            conflicts (int | None | Unset): A retarget's: of the eligible, those a job on the target topic
                holds the key of now, which would stay where they are.
     """

    action: BulkActionType0 | BulkActionType1 | BulkActionType2 | BulkActionType3 | BulkActionType4 | BulkActionType5 | BulkActionType6
    applies_to: Status
    dry_run: bool
    eligible: int
    matched: int
    sample: list[JobView]
    conflicts: int | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.bulk_action_type_0 import BulkActionType0 # noqa: PLC0415
        from ..models.bulk_action_type_1 import BulkActionType1 # noqa: PLC0415
        from ..models.bulk_action_type_2 import BulkActionType2 # noqa: PLC0415
        from ..models.bulk_action_type_3 import BulkActionType3 # noqa: PLC0415
        from ..models.bulk_action_type_4 import BulkActionType4 # noqa: PLC0415
        from ..models.bulk_action_type_5 import BulkActionType5 # noqa: PLC0415
        from ..models.bulk_action_type_6 import BulkActionType6 # noqa: PLC0415
        from ..models.job_view import JobView # noqa: PLC0415
        action: dict[str, Any]
        if isinstance(self.action, BulkActionType0):
            action = self.action.to_dict()
        elif isinstance(self.action, BulkActionType1):
            action = self.action.to_dict()
        elif isinstance(self.action, BulkActionType2):
            action = self.action.to_dict()
        elif isinstance(self.action, BulkActionType3):
            action = self.action.to_dict()
        elif isinstance(self.action, BulkActionType4):
            action = self.action.to_dict()
        elif isinstance(self.action, BulkActionType5):
            action = self.action.to_dict()
        else:
            action = self.action.to_dict()


        applies_to = self.applies_to.value

        dry_run = self.dry_run

        eligible = self.eligible

        matched = self.matched

        sample = []
        for sample_item_data in self.sample:
            sample_item = sample_item_data.to_dict()
            sample.append(sample_item)



        conflicts: int | None | Unset
        if isinstance(self.conflicts, Unset):
            conflicts = UNSET
        else:
            conflicts = self.conflicts


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "action": action,
            "applies_to": applies_to,
            "dry_run": dry_run,
            "eligible": eligible,
            "matched": matched,
            "sample": sample,
        })
        if conflicts is not UNSET:
            field_dict["conflicts"] = conflicts

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.bulk_action_type_0 import BulkActionType0 # noqa: PLC0415
        from ..models.bulk_action_type_1 import BulkActionType1 # noqa: PLC0415
        from ..models.bulk_action_type_2 import BulkActionType2 # noqa: PLC0415
        from ..models.bulk_action_type_3 import BulkActionType3 # noqa: PLC0415
        from ..models.bulk_action_type_4 import BulkActionType4 # noqa: PLC0415
        from ..models.bulk_action_type_5 import BulkActionType5 # noqa: PLC0415
        from ..models.bulk_action_type_6 import BulkActionType6 # noqa: PLC0415
        from ..models.job_view import JobView # noqa: PLC0415
        d = dict(src_dict)
        def _parse_action(data: object) -> BulkActionType0 | BulkActionType1 | BulkActionType2 | BulkActionType3 | BulkActionType4 | BulkActionType5 | BulkActionType6:
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                componentsschemas_bulk_action_type_0 = BulkActionType0.from_dict(data)



                return componentsschemas_bulk_action_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                componentsschemas_bulk_action_type_1 = BulkActionType1.from_dict(data)



                return componentsschemas_bulk_action_type_1
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                componentsschemas_bulk_action_type_2 = BulkActionType2.from_dict(data)



                return componentsschemas_bulk_action_type_2
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                componentsschemas_bulk_action_type_3 = BulkActionType3.from_dict(data)



                return componentsschemas_bulk_action_type_3
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                componentsschemas_bulk_action_type_4 = BulkActionType4.from_dict(data)



                return componentsschemas_bulk_action_type_4
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                componentsschemas_bulk_action_type_5 = BulkActionType5.from_dict(data)



                return componentsschemas_bulk_action_type_5
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            if not isinstance(data, dict):
                raise TypeError()
            componentsschemas_bulk_action_type_6 = BulkActionType6.from_dict(data)



            return componentsschemas_bulk_action_type_6

        action = _parse_action(d.pop("action"))


        applies_to = Status(d.pop("applies_to"))




        dry_run = d.pop("dry_run")

        eligible = d.pop("eligible")

        matched = d.pop("matched")

        sample = []
        _sample = d.pop("sample")
        for sample_item_data in (_sample):
            sample_item = JobView.from_dict(sample_item_data)



            sample.append(sample_item)


        def _parse_conflicts(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        conflicts = _parse_conflicts(d.pop("conflicts", UNSET))


        bulk_preview = cls(
            action=action,
            applies_to=applies_to,
            dry_run=dry_run,
            eligible=eligible,
            matched=matched,
            sample=sample,
            conflicts=conflicts,
        )


        bulk_preview.additional_properties = d
        return bulk_preview

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
