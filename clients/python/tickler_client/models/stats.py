from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast

if TYPE_CHECKING:
  from ..models.burst_ahead import BurstAhead
  from ..models.drift import Drift
  from ..models.ingress_lag import IngressLag
  from ..models.lateness_minute import LatenessMinute
  from ..models.live import Live
  from ..models.overdue_view import OverdueView
  from ..models.quota_view import QuotaView
  from ..models.schedule_stats import ScheduleStats
  from ..models.topic_count import TopicCount
  from ..models.tzdata_view import TzdataView





T = TypeVar("T", bound="Stats")



@_attrs_define
class Stats:
    """ The answer of `GET /v1/stats`: [`Truth`], with the deployment-wide
    figures left out (null) for a token limited to some topics — they would
    tell about other topics' jobs.

        Attributes:
            at (str):
            bursts (list[BurstAhead]): The busiest minute ahead of each of the token's topics (the
                longest to produce first).
            ingress_lag (list[IngressLag]): The ingress group's lag on each request topic.
            jobs (list[TopicCount]): Jobs by status and topic, of the token's topics.
            lateness (list[LatenessMinute]):
            partial (bool): True when the deployment-wide figures are left out.
            scan_ms (int):
            tzdata (TzdataView): A tzdata release and where it was read from.
            instances (Live | None | Unset):
            next_due_in_ms (int | None | Unset):
            overdue (None | OverdueView | Unset):
            quota (None | QuotaView | Unset):
            results_lag (int | None | Unset):
            schedules (None | ScheduleStats | Unset):
            window (Drift | None | Unset):
     """

    at: str
    bursts: list[BurstAhead]
    ingress_lag: list[IngressLag]
    jobs: list[TopicCount]
    lateness: list[LatenessMinute]
    partial: bool
    scan_ms: int
    tzdata: TzdataView
    instances: Live | None | Unset = UNSET
    next_due_in_ms: int | None | Unset = UNSET
    overdue: None | OverdueView | Unset = UNSET
    quota: None | QuotaView | Unset = UNSET
    results_lag: int | None | Unset = UNSET
    schedules: None | ScheduleStats | Unset = UNSET
    window: Drift | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.burst_ahead import BurstAhead # noqa: PLC0415
        from ..models.drift import Drift # noqa: PLC0415
        from ..models.ingress_lag import IngressLag # noqa: PLC0415
        from ..models.lateness_minute import LatenessMinute # noqa: PLC0415
        from ..models.live import Live # noqa: PLC0415
        from ..models.overdue_view import OverdueView # noqa: PLC0415
        from ..models.quota_view import QuotaView # noqa: PLC0415
        from ..models.schedule_stats import ScheduleStats # noqa: PLC0415
        from ..models.topic_count import TopicCount # noqa: PLC0415
        from ..models.tzdata_view import TzdataView # noqa: PLC0415
        at = self.at

        bursts = []
        for bursts_item_data in self.bursts:
            bursts_item = bursts_item_data.to_dict()
            bursts.append(bursts_item)



        ingress_lag = []
        for ingress_lag_item_data in self.ingress_lag:
            ingress_lag_item = ingress_lag_item_data.to_dict()
            ingress_lag.append(ingress_lag_item)



        jobs = []
        for jobs_item_data in self.jobs:
            jobs_item = jobs_item_data.to_dict()
            jobs.append(jobs_item)



        lateness = []
        for lateness_item_data in self.lateness:
            lateness_item = lateness_item_data.to_dict()
            lateness.append(lateness_item)



        partial = self.partial

        scan_ms = self.scan_ms

        tzdata = self.tzdata.to_dict()

        instances: dict[str, Any] | None | Unset
        if isinstance(self.instances, Unset):
            instances = UNSET
        elif isinstance(self.instances, Live):
            instances = self.instances.to_dict()
        else:
            instances = self.instances

        next_due_in_ms: int | None | Unset
        if isinstance(self.next_due_in_ms, Unset):
            next_due_in_ms = UNSET
        else:
            next_due_in_ms = self.next_due_in_ms

        overdue: dict[str, Any] | None | Unset
        if isinstance(self.overdue, Unset):
            overdue = UNSET
        elif isinstance(self.overdue, OverdueView):
            overdue = self.overdue.to_dict()
        else:
            overdue = self.overdue

        quota: dict[str, Any] | None | Unset
        if isinstance(self.quota, Unset):
            quota = UNSET
        elif isinstance(self.quota, QuotaView):
            quota = self.quota.to_dict()
        else:
            quota = self.quota

        results_lag: int | None | Unset
        if isinstance(self.results_lag, Unset):
            results_lag = UNSET
        else:
            results_lag = self.results_lag

        schedules: dict[str, Any] | None | Unset
        if isinstance(self.schedules, Unset):
            schedules = UNSET
        elif isinstance(self.schedules, ScheduleStats):
            schedules = self.schedules.to_dict()
        else:
            schedules = self.schedules

        window: dict[str, Any] | None | Unset
        if isinstance(self.window, Unset):
            window = UNSET
        elif isinstance(self.window, Drift):
            window = self.window.to_dict()
        else:
            window = self.window


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "at": at,
            "bursts": bursts,
            "ingress_lag": ingress_lag,
            "jobs": jobs,
            "lateness": lateness,
            "partial": partial,
            "scan_ms": scan_ms,
            "tzdata": tzdata,
        })
        if instances is not UNSET:
            field_dict["instances"] = instances
        if next_due_in_ms is not UNSET:
            field_dict["next_due_in_ms"] = next_due_in_ms
        if overdue is not UNSET:
            field_dict["overdue"] = overdue
        if quota is not UNSET:
            field_dict["quota"] = quota
        if results_lag is not UNSET:
            field_dict["results_lag"] = results_lag
        if schedules is not UNSET:
            field_dict["schedules"] = schedules
        if window is not UNSET:
            field_dict["window"] = window

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.burst_ahead import BurstAhead # noqa: PLC0415
        from ..models.drift import Drift # noqa: PLC0415
        from ..models.ingress_lag import IngressLag # noqa: PLC0415
        from ..models.lateness_minute import LatenessMinute # noqa: PLC0415
        from ..models.live import Live # noqa: PLC0415
        from ..models.overdue_view import OverdueView # noqa: PLC0415
        from ..models.quota_view import QuotaView # noqa: PLC0415
        from ..models.schedule_stats import ScheduleStats # noqa: PLC0415
        from ..models.topic_count import TopicCount # noqa: PLC0415
        from ..models.tzdata_view import TzdataView # noqa: PLC0415
        d = dict(src_dict)
        at = d.pop("at")

        bursts = []
        _bursts = d.pop("bursts")
        for bursts_item_data in (_bursts):
            bursts_item = BurstAhead.from_dict(bursts_item_data)



            bursts.append(bursts_item)


        ingress_lag = []
        _ingress_lag = d.pop("ingress_lag")
        for ingress_lag_item_data in (_ingress_lag):
            ingress_lag_item = IngressLag.from_dict(ingress_lag_item_data)



            ingress_lag.append(ingress_lag_item)


        jobs = []
        _jobs = d.pop("jobs")
        for jobs_item_data in (_jobs):
            jobs_item = TopicCount.from_dict(jobs_item_data)



            jobs.append(jobs_item)


        lateness = []
        _lateness = d.pop("lateness")
        for lateness_item_data in (_lateness):
            lateness_item = LatenessMinute.from_dict(lateness_item_data)



            lateness.append(lateness_item)


        partial = d.pop("partial")

        scan_ms = d.pop("scan_ms")

        tzdata = TzdataView.from_dict(d.pop("tzdata"))




        def _parse_instances(data: object) -> Live | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                instances_type_1 = Live.from_dict(data)



                return instances_type_1
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(Live | None | Unset, data)

        instances = _parse_instances(d.pop("instances", UNSET))


        def _parse_next_due_in_ms(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        next_due_in_ms = _parse_next_due_in_ms(d.pop("next_due_in_ms", UNSET))


        def _parse_overdue(data: object) -> None | OverdueView | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                overdue_type_1 = OverdueView.from_dict(data)



                return overdue_type_1
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | OverdueView | Unset, data)

        overdue = _parse_overdue(d.pop("overdue", UNSET))


        def _parse_quota(data: object) -> None | QuotaView | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                quota_type_1 = QuotaView.from_dict(data)



                return quota_type_1
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | QuotaView | Unset, data)

        quota = _parse_quota(d.pop("quota", UNSET))


        def _parse_results_lag(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        results_lag = _parse_results_lag(d.pop("results_lag", UNSET))


        def _parse_schedules(data: object) -> None | ScheduleStats | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                schedules_type_1 = ScheduleStats.from_dict(data)



                return schedules_type_1
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | ScheduleStats | Unset, data)

        schedules = _parse_schedules(d.pop("schedules", UNSET))


        def _parse_window(data: object) -> Drift | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                window_type_1 = Drift.from_dict(data)



                return window_type_1
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(Drift | None | Unset, data)

        window = _parse_window(d.pop("window", UNSET))


        stats = cls(
            at=at,
            bursts=bursts,
            ingress_lag=ingress_lag,
            jobs=jobs,
            lateness=lateness,
            partial=partial,
            scan_ms=scan_ms,
            tzdata=tzdata,
            instances=instances,
            next_due_in_ms=next_due_in_ms,
            overdue=overdue,
            quota=quota,
            results_lag=results_lag,
            schedules=schedules,
            window=window,
        )


        stats.additional_properties = d
        return stats

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
