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
  from ..models.filter_body import FilterBody





T = TypeVar("T", bound="BulkRequest")



@_attrs_define
class BulkRequest:
    """ Body of `POST /v1/jobs/bulk`.

        Attributes:
            action (BulkActionType0 | BulkActionType1 | BulkActionType2 | BulkActionType3 | BulkActionType4 |
                BulkActionType5 | BulkActionType6 | None | Unset):
            dry_run (bool | None | Unset): Required: `true` previews, `false` applies.
            filter_ (FilterBody | None | Unset):
     """

    action: BulkActionType0 | BulkActionType1 | BulkActionType2 | BulkActionType3 | BulkActionType4 | BulkActionType5 | BulkActionType6 | None | Unset = UNSET
    dry_run: bool | None | Unset = UNSET
    filter_: FilterBody | None | Unset = UNSET





    def to_dict(self) -> dict[str, Any]:
        from ..models.bulk_action_type_0 import BulkActionType0 # noqa: PLC0415
        from ..models.bulk_action_type_1 import BulkActionType1 # noqa: PLC0415
        from ..models.bulk_action_type_2 import BulkActionType2 # noqa: PLC0415
        from ..models.bulk_action_type_3 import BulkActionType3 # noqa: PLC0415
        from ..models.bulk_action_type_4 import BulkActionType4 # noqa: PLC0415
        from ..models.bulk_action_type_5 import BulkActionType5 # noqa: PLC0415
        from ..models.bulk_action_type_6 import BulkActionType6 # noqa: PLC0415
        from ..models.filter_body import FilterBody # noqa: PLC0415
        action: dict[str, Any] | None | Unset
        if isinstance(self.action, Unset):
            action = UNSET
        elif isinstance(self.action, BulkActionType0):
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
        elif isinstance(self.action, BulkActionType6):
            action = self.action.to_dict()
        else:
            action = self.action

        dry_run: bool | None | Unset
        if isinstance(self.dry_run, Unset):
            dry_run = UNSET
        else:
            dry_run = self.dry_run

        filter_: dict[str, Any] | None | Unset
        if isinstance(self.filter_, Unset):
            filter_ = UNSET
        elif isinstance(self.filter_, FilterBody):
            filter_ = self.filter_.to_dict()
        else:
            filter_ = self.filter_


        field_dict: dict[str, Any] = {}

        field_dict.update({
        })
        if action is not UNSET:
            field_dict["action"] = action
        if dry_run is not UNSET:
            field_dict["dry_run"] = dry_run
        if filter_ is not UNSET:
            field_dict["filter"] = filter_

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
        from ..models.filter_body import FilterBody # noqa: PLC0415
        d = dict(src_dict)
        def _parse_action(data: object) -> BulkActionType0 | BulkActionType1 | BulkActionType2 | BulkActionType3 | BulkActionType4 | BulkActionType5 | BulkActionType6 | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
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
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                componentsschemas_bulk_action_type_6 = BulkActionType6.from_dict(data)



                return componentsschemas_bulk_action_type_6
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(BulkActionType0 | BulkActionType1 | BulkActionType2 | BulkActionType3 | BulkActionType4 | BulkActionType5 | BulkActionType6 | None | Unset, data)

        action = _parse_action(d.pop("action", UNSET))


        def _parse_dry_run(data: object) -> bool | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(bool | None | Unset, data)

        dry_run = _parse_dry_run(d.pop("dry_run", UNSET))


        def _parse_filter_(data: object) -> FilterBody | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                filter_type_1 = FilterBody.from_dict(data)



                return filter_type_1
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(FilterBody | None | Unset, data)

        filter_ = _parse_filter_(d.pop("filter", UNSET))


        bulk_request = cls(
            action=action,
            dry_run=dry_run,
            filter_=filter_,
        )

        return bulk_request

