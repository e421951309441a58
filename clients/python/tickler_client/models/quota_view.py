from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast






T = TypeVar("T", bound="QuotaView")



@_attrs_define
class QuotaView:
    """ A token's quotas and usage.

        Attributes:
            payload_bytes (int): Payload bytes of those jobs.
            pending_jobs (int): Pending jobs it created, as last counted plus the creates since.
            token (str):
            counted_at (None | str | Unset): When the usage was last counted exactly (every
                `api.quota_recount_ms`); null before the first count.
            max_payload_bytes (int | None | Unset): Null: no limit.
            max_pending_jobs (int | None | Unset): Null: no limit.
     """

    payload_bytes: int
    pending_jobs: int
    token: str
    counted_at: None | str | Unset = UNSET
    max_payload_bytes: int | None | Unset = UNSET
    max_pending_jobs: int | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        payload_bytes = self.payload_bytes

        pending_jobs = self.pending_jobs

        token = self.token

        counted_at: None | str | Unset
        if isinstance(self.counted_at, Unset):
            counted_at = UNSET
        else:
            counted_at = self.counted_at

        max_payload_bytes: int | None | Unset
        if isinstance(self.max_payload_bytes, Unset):
            max_payload_bytes = UNSET
        else:
            max_payload_bytes = self.max_payload_bytes

        max_pending_jobs: int | None | Unset
        if isinstance(self.max_pending_jobs, Unset):
            max_pending_jobs = UNSET
        else:
            max_pending_jobs = self.max_pending_jobs


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "payload_bytes": payload_bytes,
            "pending_jobs": pending_jobs,
            "token": token,
        })
        if counted_at is not UNSET:
            field_dict["counted_at"] = counted_at
        if max_payload_bytes is not UNSET:
            field_dict["max_payload_bytes"] = max_payload_bytes
        if max_pending_jobs is not UNSET:
            field_dict["max_pending_jobs"] = max_pending_jobs

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        payload_bytes = d.pop("payload_bytes")

        pending_jobs = d.pop("pending_jobs")

        token = d.pop("token")

        def _parse_counted_at(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        counted_at = _parse_counted_at(d.pop("counted_at", UNSET))


        def _parse_max_payload_bytes(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        max_payload_bytes = _parse_max_payload_bytes(d.pop("max_payload_bytes", UNSET))


        def _parse_max_pending_jobs(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        max_pending_jobs = _parse_max_pending_jobs(d.pop("max_pending_jobs", UNSET))


        quota_view = cls(
            payload_bytes=payload_bytes,
            pending_jobs=pending_jobs,
            token=token,
            counted_at=counted_at,
            max_payload_bytes=max_payload_bytes,
            max_pending_jobs=max_pending_jobs,
        )


        quota_view.additional_properties = d
        return quota_view

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
