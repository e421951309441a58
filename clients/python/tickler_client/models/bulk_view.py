from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

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
  from ..models.bulk_filter import BulkFilter





T = TypeVar("T", bound="BulkView")



@_attrs_define
class BulkView:
    """ An operation as the API shows it.

        Attributes:
            action (BulkActionType0 | BulkActionType1 | BulkActionType2 | BulkActionType3 | BulkActionType4 |
                BulkActionType5 | BulkActionType6): What an operation does to each job it covers. Every action applies to
                jobs in one status only ([`BulkAction::applies_to`]); a job that left
                that status before its batch is skipped, never forced.
            changed (int): Jobs changed.
            conflicts (int): Jobs a retarget left where they were because a job on the target
                topic holds their key; held jobs a release without `force` left held
                because their payload still does not match their topic's schema (0
                for the other actions).
            created_at (str):
            created_by (str):
            done (int): Jobs examined so far.
            errors (list[str]):
            filter_ (BulkFilter): Which jobs an operation covers. Every field narrows; the API requires at
                least one besides `topic_patterns`.
            id (int):
            skipped (int): Jobs matched but no longer in the action's status when their batch
                came (dispatched, cancelled or edited meanwhile): left as they are.
                A retarget also skips a schedule's occurrences and the jobs on the
                target topic already; a release, the jobs not held.
            status (str):
            total (int): Jobs the filter matched when the operation started.
            updated_at (str):
            finished_at (None | str | Unset):
     """

    action: BulkActionType0 | BulkActionType1 | BulkActionType2 | BulkActionType3 | BulkActionType4 | BulkActionType5 | BulkActionType6
    changed: int
    conflicts: int
    created_at: str
    created_by: str
    done: int
    errors: list[str]
    filter_: BulkFilter
    id: int
    skipped: int
    status: str
    total: int
    updated_at: str
    finished_at: None | str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.bulk_action_type_0 import BulkActionType0 # noqa: PLC0415
        from ..models.bulk_action_type_1 import BulkActionType1 # noqa: PLC0415
        from ..models.bulk_action_type_2 import BulkActionType2 # noqa: PLC0415
        from ..models.bulk_action_type_3 import BulkActionType3 # noqa: PLC0415
        from ..models.bulk_action_type_4 import BulkActionType4 # noqa: PLC0415
        from ..models.bulk_action_type_5 import BulkActionType5 # noqa: PLC0415
        from ..models.bulk_action_type_6 import BulkActionType6 # noqa: PLC0415
        from ..models.bulk_filter import BulkFilter # noqa: PLC0415
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


        changed = self.changed

        conflicts = self.conflicts

        created_at = self.created_at

        created_by = self.created_by

        done = self.done

        errors = self.errors



        filter_ = self.filter_.to_dict()

        id = self.id

        skipped = self.skipped

        status = self.status

        total = self.total

        updated_at = self.updated_at

        finished_at: None | str | Unset
        if isinstance(self.finished_at, Unset):
            finished_at = UNSET
        else:
            finished_at = self.finished_at


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "action": action,
            "changed": changed,
            "conflicts": conflicts,
            "created_at": created_at,
            "created_by": created_by,
            "done": done,
            "errors": errors,
            "filter": filter_,
            "id": id,
            "skipped": skipped,
            "status": status,
            "total": total,
            "updated_at": updated_at,
        })
        if finished_at is not UNSET:
            field_dict["finished_at"] = finished_at

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
        from ..models.bulk_filter import BulkFilter # noqa: PLC0415
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


        changed = d.pop("changed")

        conflicts = d.pop("conflicts")

        created_at = d.pop("created_at")

        created_by = d.pop("created_by")

        done = d.pop("done")

        errors = cast(list[str], d.pop("errors"))


        filter_ = BulkFilter.from_dict(d.pop("filter"))




        id = d.pop("id")

        skipped = d.pop("skipped")

        status = d.pop("status")

        total = d.pop("total")

        updated_at = d.pop("updated_at")

        def _parse_finished_at(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        finished_at = _parse_finished_at(d.pop("finished_at", UNSET))


        bulk_view = cls(
            action=action,
            changed=changed,
            conflicts=conflicts,
            created_at=created_at,
            created_by=created_by,
            done=done,
            errors=errors,
            filter_=filter_,
            id=id,
            skipped=skipped,
            status=status,
            total=total,
            updated_at=updated_at,
            finished_at=finished_at,
        )


        bulk_view.additional_properties = d
        return bulk_view

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
