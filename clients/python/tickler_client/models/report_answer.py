from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast

if TYPE_CHECKING:
  from ..models.job_view import JobView





T = TypeVar("T", bound="ReportAnswer")



@_attrs_define
class ReportAnswer:
    """ Answer of `POST /v1/jobs/{id}/result`.

        Attributes:
            applied (bool): Whether the report changed the job.
            job (JobView): A job as the API shows it.
            ignored (None | str | Unset): Why not: `stale_attempt`, `finished`, `not_expected`,
                `not_dispatched`.
            message (None | str | Unset):
     """

    applied: bool
    job: JobView
    ignored: None | str | Unset = UNSET
    message: None | str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.job_view import JobView # noqa: PLC0415
        applied = self.applied

        job = self.job.to_dict()

        ignored: None | str | Unset
        if isinstance(self.ignored, Unset):
            ignored = UNSET
        else:
            ignored = self.ignored

        message: None | str | Unset
        if isinstance(self.message, Unset):
            message = UNSET
        else:
            message = self.message


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "applied": applied,
            "job": job,
        })
        if ignored is not UNSET:
            field_dict["ignored"] = ignored
        if message is not UNSET:
            field_dict["message"] = message

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.job_view import JobView # noqa: PLC0415
        d = dict(src_dict)
        applied = d.pop("applied")

        job = JobView.from_dict(d.pop("job"))




        def _parse_ignored(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        ignored = _parse_ignored(d.pop("ignored", UNSET))


        def _parse_message(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        message = _parse_message(d.pop("message", UNSET))


        report_answer = cls(
            applied=applied,
            job=job,
            ignored=ignored,
            message=message,
        )


        report_answer.additional_properties = d
        return report_answer

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
