from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast

if TYPE_CHECKING:
  from ..models.create_job import CreateJob





T = TypeVar("T", bound="CreateBatch")



@_attrs_define
class CreateBatch:
    """ Body of `POST /v1/jobs/batch`. Items stay raw text until each is read
    on its own: a payload is kept byte for byte as sent (as on single
    create), and one bad item is that item's error, not the batch's.

        Attributes:
            jobs (list[CreateJob]):
     """

    jobs: list[CreateJob]





    def to_dict(self) -> dict[str, Any]:
        from ..models.create_job import CreateJob # noqa: PLC0415
        jobs = []
        for jobs_item_data in self.jobs:
            jobs_item = jobs_item_data.to_dict()
            jobs.append(jobs_item)




        field_dict: dict[str, Any] = {}

        field_dict.update({
            "jobs": jobs,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.create_job import CreateJob # noqa: PLC0415
        d = dict(src_dict)
        jobs = []
        _jobs = d.pop("jobs")
        for jobs_item_data in (_jobs):
            jobs_item = CreateJob.from_dict(jobs_item_data)



            jobs.append(jobs_item)


        create_batch = cls(
            jobs=jobs,
        )

        return create_batch

