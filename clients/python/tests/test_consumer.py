"""The consumer kit: its pure parts, and (with TICKLER_URL set, as
tests/consumer_kits.rs runs it) a handler against a live tickler that fails
once, succeeds on the retry and sees a duplicate, leaving one ``ok``."""

import os
import threading
import time
import uuid

import pytest

from tickler_client import AuthenticatedClient
from tickler_client.consumer import (
    ApiReporter,
    JobRecord,
    Kit,
    MemorySeen,
    Outcome,
    RecordError,
)


def test_a_record_of_ticklers_parses_into_its_job():
    job = JobRecord.from_parts(
        "billing", 1, 42, b"invoice-7", b'{"n": 7}',
        [("h", b"v"), ("tickler-job-id", b"17"), ("tickler-attempt", b"2"),
         ("tickler-scheduled-at", b"1700000000000"), ("tickler-dispatched-at", b"1700000000004"),
         ("tickler-correlation-id", b"c-1")],
    )
    assert (job.id, job.attempt) == (17, 2)
    assert (job.scheduled_at_ms, job.dispatched_at_ms) == (1700000000000, 1700000000004)
    assert job.correlation_id == "c-1" and job.schedule_id is None
    assert job.headers == [("h", b"v")] and job.header("h") == "v"
    assert job.json() == {"n": 7}


def test_a_record_without_a_job_id_is_not_ticklers_and_bad_headers_are_errors():
    assert JobRecord.from_parts("t", 0, 0, None, b"", [("h", b"v")]) is None
    with pytest.raises(RecordError) as bad:
        JobRecord.from_parts("t", 0, 0, None, b"", [("tickler-job-id", b"17"), ("tickler-attempt", b"two")])
    assert bad.value.header == "tickler-attempt"
    with pytest.raises(RecordError) as missing:
        JobRecord.from_parts("t", 0, 0, None, b"", [("tickler-job-id", b"17"), ("tickler-attempt", b"1")])
    assert missing.value.header == "tickler-scheduled-at"


def test_outcomes_are_reports_and_read_back():
    cases = [
        (Outcome.ok(), {"job_id": 5, "attempt": 3, "outcome": "ok"}),
        (Outcome.retry("busy", after_ms=1500),
         {"job_id": 5, "attempt": 3, "outcome": "retry", "error": "busy", "retry_after_ms": 1500}),
        (Outcome.failed("bad card"), {"job_id": 5, "attempt": 3, "outcome": "failed", "error": "bad card"}),
    ]
    for outcome, report in cases:
        assert outcome.report(5, 3) == report
        assert Outcome.from_report(report) == outcome
    assert Outcome.from_report({"outcome": "maybe"}) is None


def test_the_memory_store_forgets_the_least_recently_used_first():
    seen = MemorySeen(2)
    seen.remember(1, 1, Outcome.ok())
    seen.remember(2, 1, Outcome.ok())
    assert seen.outcome(1, 1) == Outcome.ok()
    seen.remember(3, 1, Outcome.failed("x"))
    assert seen.outcome(2, 1) is None
    assert seen.outcome(1, 1) == Outcome.ok() and len(seen) == 2


def eventually(check, seconds=60):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"not within {seconds} s")


@pytest.mark.skipif("TICKLER_URL" not in os.environ, reason="needs a live tickler (tests/consumer_kits.rs)")
def test_the_kit_retries_once_skips_a_duplicate_and_reports_one_ok():
    from confluent_kafka import Consumer, Producer, TopicPartition

    brokers, topic = os.environ["KAFKA_BROKERS"], os.environ["TICKLER_TOPIC"]
    api = AuthenticatedClient(base_url=os.environ["TICKLER_URL"], token=os.environ["TICKLER_TOKEN"])
    http = api.get_httpx_client()
    group = f"kit-python-{uuid.uuid4().hex[:8]}"
    key = f"order-{uuid.uuid4().hex[:8]}"
    events, calls = [], []

    def handler(job):
        calls.append(job)
        if job.attempt == 1:
            return Outcome.retry("the first try fails", after_ms=100)
        return Outcome.ok()

    kit = Kit({"bootstrap.servers": brokers, "group.id": group, "auto.offset.reset": "earliest",
               "fetch.wait.max.ms": 50},
              [topic], ApiReporter(api), on_event=events.append)
    stop = threading.Event()
    running = threading.Thread(target=kit.run, args=(handler, stop))
    running.start()
    try:
        created = http.post("/v1/jobs", json={
            "topic": topic, "key": key, "payload": {"order": 7}, "delay_ms": 0,
            "expects_result": True, "max_attempts": 3, "ack_timeout_ms": 60000})
        assert created.status_code == 201, created.text
        job_id = created.json()["id"]
        eventually(lambda: http.get(f"/v1/jobs/{job_id}").json()["status"] == "succeeded")
        second = calls[-1]
        assert (second.id, second.attempt, second.key) == (job_id, 2, key.encode())
        assert second.json() == {"order": 7}
        # The retry's record again, as after a crash of tickler's.
        producer = Producer({"bootstrap.servers": brokers})
        producer.produce(topic, key=second.key, value=second.payload, headers=second.record_headers())
        assert producer.flush(10) == 0
        eventually(lambda: any(e.kind == "duplicate" and (e.job_id, e.attempt) == (job_id, 2) for e in events))
    finally:
        stop.set()
        running.join(30)
    assert not running.is_alive()
    assert [c.attempt for c in calls] == [1, 2], "the handler ran once per attempt"
    handled = [(e.attempt, e.outcome) for e in events if e.kind == "handled"]
    assert handled == [(1, Outcome.retry("the first try fails", after_ms=100)), (2, Outcome.ok())]
    history = http.get(f"/v1/jobs/{job_id}/history").json()["events"]
    assert sum(1 for e in history if e["status"] == "succeeded") == 1, history
    # The group committed past every record it reported.
    check = Consumer({"bootstrap.servers": brokers, "group.id": group})
    metadata = check.list_topics(topic, timeout=10)
    partitions = [TopicPartition(topic, p) for p in metadata.topics[topic].partitions]
    for committed in check.committed(partitions, timeout=10):
        _, high = check.get_watermark_offsets(committed, timeout=10)
        assert committed.offset == high or (high == 0 and committed.offset < 0), committed
    check.close()
