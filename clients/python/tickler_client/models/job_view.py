from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast

if TYPE_CHECKING:
  from ..models.consumed_view import ConsumedView
  from ..models.job_view_headers import JobViewHeaders
  from ..models.kafka_position import KafkaPosition





T = TypeVar("T", bound="JobView")



@_attrs_define
class JobView:
    """ A job as the API shows it.

        Attributes:
            ack_timeout_ms (int):
            attempt (int):
            backoff_base_ms (int):
            backoff_cap_ms (int):
            created_at (str):
            expects_result (bool):
            headers (JobViewHeaders):
            id (int):
            max_attempts (int):
            run_at (str):
            status (str):
            topic (str):
            updated_at (str):
            version (int):
            ack_deadline (None | str | Unset): While dispatched and waiting for a result: when silence becomes a
                retry.
            capped (bool | None | Unset): In a debounce's answer: whether the time asked for was past the
                ceiling, so the job was moved to `debounce_until` instead.
            consumed (list[ConsumedView] | Unset): When each consumer group that reads its partition read past its
                record (`at` null: not yet); absent in listings.
            debounce_until (None | str | Unset): Debounced with `max_delay_ms`: the latest a debounce may move it to
                (its generation's first request + `max_delay_ms`).
            debounced (bool | None | Unset): In a debounce's answer: true, the pending job was moved.
            dispatched_at (None | str | Unset):
            expires_at (None | str | Unset): Not produced by then, it ends `expired` and is never produced
                (`expires_at` or `ttl_ms` on create, or an occurrence of a
                `misfire: skip` schedule).
            generation (int | None | Unset): Its key's generation, from 1 for a job a debounce created after the
                one before went out (absent for the first).
            held_at (None | str | Unset): Held back, still pending, because its payload no longer matched its
                topic's payload schema when it came due: since when, and where the
                payload failed. `POST /v1/jobs/{id}/release` lets it go.
            held_reason (None | str | Unset):
            kafka (KafkaPosition | None | Unset):
            key (None | str | Unset):
            last_error (None | str | Unset):
            payload (Any | Unset): A JSON payload, as sent; absent in listings and for bytes.
            payload_base64 (None | str | Unset): A bytes payload, base64; absent in listings and for JSON.
            previous_id (int | None | Unset):
            produce_at (None | str | Unset): With a window: the instant tickler decided on in it, when it goes
                out (`dispatched_at` says when it did).
            run_local (None | str | Unset): Given a wall-clock time: the local time (`2027-03-28T09:00:00.000`)
                its run_at was computed from, in `time_zone`, with tzdata release
                `tzdata_version`. A newer tzdata moves run_at where it changes.
            schedule_id (int | None | Unset): The schedule whose occurrence it is.
            time_zone (None | str | Unset):
            traceparent (None | str | Unset): The W3C trace context of the creating request, put on the record.
            tzdata_version (None | str | Unset):
            verified_at (None | str | Unset): When tickler read its record back at `kafka`'s position and found
                it there (`dispatcher.verify`); null: not verified (not yet, not
                sampled, verification off, or dispatched before it existed).
            window_ms (int | None | Unset): Its flexible window: it may go out at any instant of [run_at,
                run_at + window_ms].
     """

    ack_timeout_ms: int
    attempt: int
    backoff_base_ms: int
    backoff_cap_ms: int
    created_at: str
    expects_result: bool
    headers: JobViewHeaders
    id: int
    max_attempts: int
    run_at: str
    status: str
    topic: str
    updated_at: str
    version: int
    ack_deadline: None | str | Unset = UNSET
    capped: bool | None | Unset = UNSET
    consumed: list[ConsumedView] | Unset = UNSET
    debounce_until: None | str | Unset = UNSET
    debounced: bool | None | Unset = UNSET
    dispatched_at: None | str | Unset = UNSET
    expires_at: None | str | Unset = UNSET
    generation: int | None | Unset = UNSET
    held_at: None | str | Unset = UNSET
    held_reason: None | str | Unset = UNSET
    kafka: KafkaPosition | None | Unset = UNSET
    key: None | str | Unset = UNSET
    last_error: None | str | Unset = UNSET
    payload: Any | Unset = UNSET
    payload_base64: None | str | Unset = UNSET
    previous_id: int | None | Unset = UNSET
    produce_at: None | str | Unset = UNSET
    run_local: None | str | Unset = UNSET
    schedule_id: int | None | Unset = UNSET
    time_zone: None | str | Unset = UNSET
    traceparent: None | str | Unset = UNSET
    tzdata_version: None | str | Unset = UNSET
    verified_at: None | str | Unset = UNSET
    window_ms: int | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.consumed_view import ConsumedView # noqa: PLC0415
        from ..models.job_view_headers import JobViewHeaders # noqa: PLC0415
        from ..models.kafka_position import KafkaPosition # noqa: PLC0415
        ack_timeout_ms = self.ack_timeout_ms

        attempt = self.attempt

        backoff_base_ms = self.backoff_base_ms

        backoff_cap_ms = self.backoff_cap_ms

        created_at = self.created_at

        expects_result = self.expects_result

        headers = self.headers.to_dict()

        id = self.id

        max_attempts = self.max_attempts

        run_at = self.run_at

        status = self.status

        topic = self.topic

        updated_at = self.updated_at

        version = self.version

        ack_deadline: None | str | Unset
        if isinstance(self.ack_deadline, Unset):
            ack_deadline = UNSET
        else:
            ack_deadline = self.ack_deadline

        capped: bool | None | Unset
        if isinstance(self.capped, Unset):
            capped = UNSET
        else:
            capped = self.capped

        consumed: list[dict[str, Any]] | Unset = UNSET
        if not isinstance(self.consumed, Unset):
            consumed = []
            for consumed_item_data in self.consumed:
                consumed_item = consumed_item_data.to_dict()
                consumed.append(consumed_item)



        debounce_until: None | str | Unset
        if isinstance(self.debounce_until, Unset):
            debounce_until = UNSET
        else:
            debounce_until = self.debounce_until

        debounced: bool | None | Unset
        if isinstance(self.debounced, Unset):
            debounced = UNSET
        else:
            debounced = self.debounced

        dispatched_at: None | str | Unset
        if isinstance(self.dispatched_at, Unset):
            dispatched_at = UNSET
        else:
            dispatched_at = self.dispatched_at

        expires_at: None | str | Unset
        if isinstance(self.expires_at, Unset):
            expires_at = UNSET
        else:
            expires_at = self.expires_at

        generation: int | None | Unset
        if isinstance(self.generation, Unset):
            generation = UNSET
        else:
            generation = self.generation

        held_at: None | str | Unset
        if isinstance(self.held_at, Unset):
            held_at = UNSET
        else:
            held_at = self.held_at

        held_reason: None | str | Unset
        if isinstance(self.held_reason, Unset):
            held_reason = UNSET
        else:
            held_reason = self.held_reason

        kafka: dict[str, Any] | None | Unset
        if isinstance(self.kafka, Unset):
            kafka = UNSET
        elif isinstance(self.kafka, KafkaPosition):
            kafka = self.kafka.to_dict()
        else:
            kafka = self.kafka

        key: None | str | Unset
        if isinstance(self.key, Unset):
            key = UNSET
        else:
            key = self.key

        last_error: None | str | Unset
        if isinstance(self.last_error, Unset):
            last_error = UNSET
        else:
            last_error = self.last_error

        payload = self.payload

        payload_base64: None | str | Unset
        if isinstance(self.payload_base64, Unset):
            payload_base64 = UNSET
        else:
            payload_base64 = self.payload_base64

        previous_id: int | None | Unset
        if isinstance(self.previous_id, Unset):
            previous_id = UNSET
        else:
            previous_id = self.previous_id

        produce_at: None | str | Unset
        if isinstance(self.produce_at, Unset):
            produce_at = UNSET
        else:
            produce_at = self.produce_at

        run_local: None | str | Unset
        if isinstance(self.run_local, Unset):
            run_local = UNSET
        else:
            run_local = self.run_local

        schedule_id: int | None | Unset
        if isinstance(self.schedule_id, Unset):
            schedule_id = UNSET
        else:
            schedule_id = self.schedule_id

        time_zone: None | str | Unset
        if isinstance(self.time_zone, Unset):
            time_zone = UNSET
        else:
            time_zone = self.time_zone

        traceparent: None | str | Unset
        if isinstance(self.traceparent, Unset):
            traceparent = UNSET
        else:
            traceparent = self.traceparent

        tzdata_version: None | str | Unset
        if isinstance(self.tzdata_version, Unset):
            tzdata_version = UNSET
        else:
            tzdata_version = self.tzdata_version

        verified_at: None | str | Unset
        if isinstance(self.verified_at, Unset):
            verified_at = UNSET
        else:
            verified_at = self.verified_at

        window_ms: int | None | Unset
        if isinstance(self.window_ms, Unset):
            window_ms = UNSET
        else:
            window_ms = self.window_ms


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "ack_timeout_ms": ack_timeout_ms,
            "attempt": attempt,
            "backoff_base_ms": backoff_base_ms,
            "backoff_cap_ms": backoff_cap_ms,
            "created_at": created_at,
            "expects_result": expects_result,
            "headers": headers,
            "id": id,
            "max_attempts": max_attempts,
            "run_at": run_at,
            "status": status,
            "topic": topic,
            "updated_at": updated_at,
            "version": version,
        })
        if ack_deadline is not UNSET:
            field_dict["ack_deadline"] = ack_deadline
        if capped is not UNSET:
            field_dict["capped"] = capped
        if consumed is not UNSET:
            field_dict["consumed"] = consumed
        if debounce_until is not UNSET:
            field_dict["debounce_until"] = debounce_until
        if debounced is not UNSET:
            field_dict["debounced"] = debounced
        if dispatched_at is not UNSET:
            field_dict["dispatched_at"] = dispatched_at
        if expires_at is not UNSET:
            field_dict["expires_at"] = expires_at
        if generation is not UNSET:
            field_dict["generation"] = generation
        if held_at is not UNSET:
            field_dict["held_at"] = held_at
        if held_reason is not UNSET:
            field_dict["held_reason"] = held_reason
        if kafka is not UNSET:
            field_dict["kafka"] = kafka
        if key is not UNSET:
            field_dict["key"] = key
        if last_error is not UNSET:
            field_dict["last_error"] = last_error
        if payload is not UNSET:
            field_dict["payload"] = payload
        if payload_base64 is not UNSET:
            field_dict["payload_base64"] = payload_base64
        if previous_id is not UNSET:
            field_dict["previous_id"] = previous_id
        if produce_at is not UNSET:
            field_dict["produce_at"] = produce_at
        if run_local is not UNSET:
            field_dict["run_local"] = run_local
        if schedule_id is not UNSET:
            field_dict["schedule_id"] = schedule_id
        if time_zone is not UNSET:
            field_dict["time_zone"] = time_zone
        if traceparent is not UNSET:
            field_dict["traceparent"] = traceparent
        if tzdata_version is not UNSET:
            field_dict["tzdata_version"] = tzdata_version
        if verified_at is not UNSET:
            field_dict["verified_at"] = verified_at
        if window_ms is not UNSET:
            field_dict["window_ms"] = window_ms

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.consumed_view import ConsumedView # noqa: PLC0415
        from ..models.job_view_headers import JobViewHeaders # noqa: PLC0415
        from ..models.kafka_position import KafkaPosition # noqa: PLC0415
        d = dict(src_dict)
        ack_timeout_ms = d.pop("ack_timeout_ms")

        attempt = d.pop("attempt")

        backoff_base_ms = d.pop("backoff_base_ms")

        backoff_cap_ms = d.pop("backoff_cap_ms")

        created_at = d.pop("created_at")

        expects_result = d.pop("expects_result")

        headers = JobViewHeaders.from_dict(d.pop("headers"))




        id = d.pop("id")

        max_attempts = d.pop("max_attempts")

        run_at = d.pop("run_at")

        status = d.pop("status")

        topic = d.pop("topic")

        updated_at = d.pop("updated_at")

        version = d.pop("version")

        def _parse_ack_deadline(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        ack_deadline = _parse_ack_deadline(d.pop("ack_deadline", UNSET))


        def _parse_capped(data: object) -> bool | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(bool | None | Unset, data)

        capped = _parse_capped(d.pop("capped", UNSET))


        _consumed = d.pop("consumed", UNSET)
        consumed: list[ConsumedView] | Unset = UNSET
        if _consumed is not UNSET:
            consumed = []
            for consumed_item_data in _consumed:
                consumed_item = ConsumedView.from_dict(consumed_item_data)



                consumed.append(consumed_item)


        def _parse_debounce_until(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        debounce_until = _parse_debounce_until(d.pop("debounce_until", UNSET))


        def _parse_debounced(data: object) -> bool | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(bool | None | Unset, data)

        debounced = _parse_debounced(d.pop("debounced", UNSET))


        def _parse_dispatched_at(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        dispatched_at = _parse_dispatched_at(d.pop("dispatched_at", UNSET))


        def _parse_expires_at(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        expires_at = _parse_expires_at(d.pop("expires_at", UNSET))


        def _parse_generation(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        generation = _parse_generation(d.pop("generation", UNSET))


        def _parse_held_at(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        held_at = _parse_held_at(d.pop("held_at", UNSET))


        def _parse_held_reason(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        held_reason = _parse_held_reason(d.pop("held_reason", UNSET))


        def _parse_kafka(data: object) -> KafkaPosition | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                kafka_type_1 = KafkaPosition.from_dict(data)



                return kafka_type_1
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(KafkaPosition | None | Unset, data)

        kafka = _parse_kafka(d.pop("kafka", UNSET))


        def _parse_key(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        key = _parse_key(d.pop("key", UNSET))


        def _parse_last_error(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        last_error = _parse_last_error(d.pop("last_error", UNSET))


        payload = d.pop("payload", UNSET)

        def _parse_payload_base64(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        payload_base64 = _parse_payload_base64(d.pop("payload_base64", UNSET))


        def _parse_previous_id(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        previous_id = _parse_previous_id(d.pop("previous_id", UNSET))


        def _parse_produce_at(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        produce_at = _parse_produce_at(d.pop("produce_at", UNSET))


        def _parse_run_local(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        run_local = _parse_run_local(d.pop("run_local", UNSET))


        def _parse_schedule_id(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        schedule_id = _parse_schedule_id(d.pop("schedule_id", UNSET))


        def _parse_time_zone(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        time_zone = _parse_time_zone(d.pop("time_zone", UNSET))


        def _parse_traceparent(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        traceparent = _parse_traceparent(d.pop("traceparent", UNSET))


        def _parse_tzdata_version(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        tzdata_version = _parse_tzdata_version(d.pop("tzdata_version", UNSET))


        def _parse_verified_at(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        verified_at = _parse_verified_at(d.pop("verified_at", UNSET))


        def _parse_window_ms(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        window_ms = _parse_window_ms(d.pop("window_ms", UNSET))


        job_view = cls(
            ack_timeout_ms=ack_timeout_ms,
            attempt=attempt,
            backoff_base_ms=backoff_base_ms,
            backoff_cap_ms=backoff_cap_ms,
            created_at=created_at,
            expects_result=expects_result,
            headers=headers,
            id=id,
            max_attempts=max_attempts,
            run_at=run_at,
            status=status,
            topic=topic,
            updated_at=updated_at,
            version=version,
            ack_deadline=ack_deadline,
            capped=capped,
            consumed=consumed,
            debounce_until=debounce_until,
            debounced=debounced,
            dispatched_at=dispatched_at,
            expires_at=expires_at,
            generation=generation,
            held_at=held_at,
            held_reason=held_reason,
            kafka=kafka,
            key=key,
            last_error=last_error,
            payload=payload,
            payload_base64=payload_base64,
            previous_id=previous_id,
            produce_at=produce_at,
            run_local=run_local,
            schedule_id=schedule_id,
            time_zone=time_zone,
            traceparent=traceparent,
            tzdata_version=tzdata_version,
            verified_at=verified_at,
            window_ms=window_ms,
        )


        job_view.additional_properties = d
        return job_view

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
