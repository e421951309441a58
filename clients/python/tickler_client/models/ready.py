from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast

if TYPE_CHECKING:
  from ..models.ready_checks import ReadyChecks





T = TypeVar("T", bound="Ready")



@_attrs_define
class Ready:
    """ Answer of `/readyz`: ready or not, and each check's finding.

        Attributes:
            checks (ReadyChecks): Each check: `ok`, or what is wrong (`mysql`, `redis`, `schema`,
                `shards`, `draining`).
            status (str): `ready` or `not_ready`.
     """

    checks: ReadyChecks
    status: str
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.ready_checks import ReadyChecks # noqa: PLC0415
        checks = self.checks.to_dict()

        status = self.status


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "checks": checks,
            "status": status,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.ready_checks import ReadyChecks # noqa: PLC0415
        d = dict(src_dict)
        checks = ReadyChecks.from_dict(d.pop("checks"))




        status = d.pop("status")

        ready = cls(
            checks=checks,
            status=status,
        )


        ready.additional_properties = d
        return ready

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
