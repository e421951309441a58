from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast

if TYPE_CHECKING:
  from ..models.job_view import JobView





T = TypeVar("T", bound="CancelAnswer")



@_attrs_define
class CancelAnswer:
    """ Answer of a cancel that applied (or had applied before).

        Attributes:
            job (JobView): A job as the API shows it.
            outcome (str): `cancelled`.
     """

    job: JobView
    outcome: str
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.job_view import JobView # noqa: PLC0415
        job = self.job.to_dict()

        outcome = self.outcome


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "job": job,
            "outcome": outcome,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.job_view import JobView # noqa: PLC0415
        d = dict(src_dict)
        job = JobView.from_dict(d.pop("job"))




        outcome = d.pop("outcome")

        cancel_answer = cls(
            job=job,
            outcome=outcome,
        )


        cancel_answer.additional_properties = d
        return cancel_answer

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
