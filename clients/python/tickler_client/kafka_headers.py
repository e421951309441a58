"""Headers of a request record for tickler's Kafka ingress (docs/api.md,
"Scheduling through Kafka"): build them here, produce with any Kafka client.

    from tickler_client.kafka_headers import request_headers
    headers = request_headers("billing.charge", run_at="2027-01-01T00:00:00Z",
                              max_attempts=8, correlation_id="req-42")
    producer.produce("tickler.requests", key="invoice-7", value=payload,
                     headers=headers)

The record's key is the job's key (its idempotency key) and its value the
payload; a null value cancels the job. Written by hand, not generated.
"""

from __future__ import annotations

import datetime as _dt
from typing import List, Optional, Tuple, Union

Header = Tuple[str, bytes]

_POLICY = {
    "max_attempts": "tickler-max-attempts",
    "backoff_base_ms": "tickler-backoff-base-ms",
    "backoff_cap_ms": "tickler-backoff-cap-ms",
    "ack_timeout_ms": "tickler-ack-timeout-ms",
}


def _time(value: Union[str, _dt.datetime]) -> str:
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            raise ValueError("a datetime needs a time zone (use datetime.timezone.utc)")
        return value.isoformat()
    return value


def request_headers(
    target_topic: str,
    *,
    run_at: Union[str, _dt.datetime, None] = None,
    delay_ms: Optional[int] = None,
    target_key: Optional[str] = None,
    window_ms: Optional[int] = None,
    expires_at: Union[str, _dt.datetime, None] = None,
    expects_result: Optional[bool] = None,
    correlation_id: Optional[str] = None,
    **policy: int,
) -> List[Header]:
    """The headers of a create (or move) request for a job on `target_topic`.

    Exactly one of `run_at` (RFC 3339, or an aware datetime) and `delay_ms`
    (after the record's own timestamp). `policy` takes `max_attempts`,
    `backoff_base_ms`, `backoff_cap_ms` and `ack_timeout_ms`. A value tickler
    would refuse is refused here first, with the same rule.
    """
    if (run_at is None) == (delay_ms is None):
        raise ValueError("give exactly one of run_at and delay_ms")
    if delay_ms is not None and delay_ms < 0:
        raise ValueError("delay_ms is 0 or more")
    if window_ms is not None and not 0 <= window_ms <= 86_400_000:
        raise ValueError("window_ms is 0 to 86,400,000")
    unknown = set(policy) - set(_POLICY)
    if unknown:
        raise TypeError(f"unknown request fields: {sorted(unknown)}")
    headers: List[Header] = [("tickler-target-topic", target_topic.encode())]
    if run_at is not None:
        headers.append(("tickler-run-at", _time(run_at).encode()))
    if delay_ms is not None:
        headers.append(("tickler-delay-ms", str(int(delay_ms)).encode()))
    if target_key is not None:
        headers.append(("tickler-target-key", target_key.encode()))
    if window_ms is not None:
        headers.append(("tickler-window-ms", str(int(window_ms)).encode()))
    if expires_at is not None:
        headers.append(("tickler-expires-at", _time(expires_at).encode()))
    if expects_result is not None:
        headers.append(("tickler-expects-result", b"true" if expects_result else b"false"))
    for name, value in sorted(policy.items()):
        headers.append((_POLICY[name], str(int(value)).encode()))
    if correlation_id is not None:
        headers.append(("tickler-correlation-id", correlation_id.encode()))
    return headers


def cancel_headers(target_topic: str, *, correlation_id: Optional[str] = None) -> List[Header]:
    """The headers of a cancel: produce them with the job's key and a null
    value (a tombstone)."""
    headers: List[Header] = [("tickler-target-topic", target_topic.encode())]
    if correlation_id is not None:
        headers.append(("tickler-correlation-id", correlation_id.encode()))
    return headers
