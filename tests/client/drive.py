"""Drives every operation of tickler's API through a client generated from
its OpenAPI document by openapi-python-client (tests/openapi.rs generates it
and runs this against a live tickler).

    python drive.py CLIENT_PARENT_DIR BASE_URL TOKEN TOPIC

Each call must answer 2xx and parse into the model the document promises
(an answer that does not match its schema raises in the generated code).
Prints one JSON line: the operationIds driven, in order.
"""

import json
import sys
import time

sys.path.insert(0, sys.argv[1])
base_url, token, topic = sys.argv[2], sys.argv[3], sys.argv[4]

from tickler_client import AuthenticatedClient  # noqa: E402
from tickler_client.api.dev import dev_clock_advance, dev_clock_get  # noqa: E402
from tickler_client.api.jobs import (  # noqa: E402
    job_cancel, job_create, job_get, job_history, job_modify, job_release, jobs_batch_create,
    jobs_list)
from tickler_client.api.operations import (  # noqa: E402
    audit_list, bulk_op_get, bulk_ops_list, forecast_get, health, jobs_bulk_create, readiness_get,
    stats_get)
from tickler_client.api.results import job_redrive, job_result_report  # noqa: E402
from tickler_client.api.schedules import (  # noqa: E402
    schedule_audit, schedule_backfill, schedule_create, schedule_delete, schedule_get,
    schedule_modify, schedule_pause, schedule_preview, schedule_resume, schedule_trigger,
    schedules_list)
from tickler_client.api.topics import (  # noqa: E402
    topic_get, topic_modify, topic_pause, topic_resume, topics_list)
from tickler_client.models import (  # noqa: E402
    BackfillSchedule, BulkRequest, ClockAdvance, CreateBatch, CreateJob, CreateSchedule, ErrorBody,
    PatchJob, PatchSchedule, PatchTopic, PreviewSchedule, RedriveJob, ReleaseJob, ReportBody,
    TriggerSchedule)

client = AuthenticatedClient(base_url=base_url, token=token, raise_on_unexpected_status=True)
driven = []


def call(module, *args, **kwargs):
    """Calls one operation; returns its parsed answer, which must be a 2xx."""
    response = module.sync_detailed(*args, client=client, **kwargs)
    name = module.__name__.rsplit(".", 1)[1]
    body = response.content.decode(errors="replace")[:500]
    assert 200 <= response.status_code < 300, f"{name}: {response.status_code} {body}"
    assert response.parsed is not None, f"{name}: {response.status_code} not parsed: {body}"
    assert not isinstance(response.parsed, ErrorBody), f"{name}: an error: {body}"
    driven.append(name)
    return response.parsed


call(health)
readiness = call(readiness_get)
assert readiness.status == "ready" or readiness.status == "not_ready", readiness

later = CreateJob.from_dict({"topic": topic, "key": "later", "payload": {"n": 1},
                             "run_at": "2030-01-31T09:00:00Z",
                             "expires_at": "2030-01-31T09:30:00Z"})
job = call(job_create, body=later)
assert job.expires_at.startswith("2030-01-31T09:30"), job.expires_at
call(jobs_batch_create, body=CreateBatch.from_dict({"jobs": [
    {"topic": topic, "key": "b1", "payload": 1, "delay_ms": 600000, "ttl_ms": 60000,
     "window_ms": 30000},
    {"topic": topic, "key": "b2", "payload": 2, "delay_ms": 600000}]}))
job = call(job_get, job.id)
page = call(jobs_list, topic=topic, limit=10)
assert len(page.jobs) == 3, page
job = call(job_modify, job.id, body=PatchJob.from_dict(
    {"version": job.version, "run_at": "2030-02-01T09:00:00Z", "ttl_ms": 600000}))
assert job.run_at.startswith("2030-02-01"), job.run_at
assert job.expires_at.startswith("2030-02-01T09:10"), job.expires_at
job = call(job_modify, job.id, body=PatchJob.from_dict(
    {"version": job.version, "window_ms": 120000}))
assert job.window_ms == 120000 and job.produce_at >= job.run_at, job
assert job.expires_at.startswith("2030-02-01T09:10"), "the expiry stays"
job = call(job_modify, job.id, body=PatchJob.from_dict(
    {"version": job.version, "window_ms": None}))
assert not job.window_ms and not job.produce_at, job
history = call(job_history, job.id)
assert len(history.events) >= 2, history
answer = call(job_cancel, job.id)
assert str(answer.outcome) == "cancelled", answer

# A job produced now whose consumer reports it failed, then redriven.
now = call(job_create, body=CreateJob.from_dict(
    {"topic": topic, "payload": {"n": 2}, "delay_ms": 0, "expects_result": True,
     "max_attempts": 1}))
deadline = time.time() + 20
while str(job_get.sync(now.id, client=client).status) != "dispatched":
    assert time.time() < deadline, "the job is produced within 20 s"
    time.sleep(0.1)
report = call(job_result_report, now.id, body=ReportBody.from_dict(
    {"attempt": 1, "outcome": "failed", "error": "card declined"}))
assert report.applied, report
redriven = call(job_redrive, now.id, body=RedriveJob.from_dict({"delay_ms": 600000}))
assert str(redriven.status) == "pending", redriven

bulk = {"filter": {"topic": topic, "status": "pending"}, "action": {"type": "shift", "by_ms": 1000}}
preview = call(jobs_bulk_create, body=BulkRequest.from_dict({**bulk, "dry_run": True}))
assert preview.eligible >= 3, preview
started = call(jobs_bulk_create, body=BulkRequest.from_dict({**bulk, "dry_run": False}))
call(bulk_ops_list)
call(bulk_op_get, started.id)

schedule = call(schedule_create, body=CreateSchedule.from_dict(
    {"topic": topic, "key": "renewal", "cron": "0 9 1 * *", "time_zone": "Europe/Berlin",
     "payload": {"member": 42}, "jitter_ms": 60000, "window_ms": 300000}))
assert schedule.jitter_ms == 60000 and schedule.window_ms == 300000, schedule
call(schedules_list, topic=topic)
schedule = call(schedule_get, schedule.id)
changed = call(schedule_modify, schedule.id, body=PatchSchedule.from_dict(
    {"version": schedule.version, "cron": "0 10 1 * *", "window_ms": 600000, "jitter_ms": 0}))
assert changed.schedule.cron == "0 10 1 * *", changed
assert changed.schedule.window_ms == 600000 and not changed.schedule.jitter_ms, changed
call(schedule_pause, schedule.id)
call(schedule_resume, schedule.id)
audit = call(schedule_audit, schedule.id, from_="2030-01-01T00:00:00Z", to="2031-01-01T00:00:00Z")
assert audit.expected == 12 and audit.missing == 0, audit
assert all(o.outcome == "upcoming" for o in audit.occurrences), audit
rerun = TriggerSchedule.from_dict({"key": "renewal-rerun-1", "delay_ms": 600000})
triggered = call(schedule_trigger, schedule.id, body=rerun)
assert triggered.key == "renewal-rerun-1" and triggered.schedule_id == schedule.id, triggered
again = call(schedule_trigger, schedule.id, body=rerun)
assert again.id == triggered.id, again
backfill = call(schedule_backfill, schedule.id, body=BackfillSchedule.from_dict(
    {"from": "2026-01-01T00:00:00Z", "to": "2026-01-02T00:00:00Z"}))
assert backfill.dry_run and backfill.expected == 0 and backfill.created == 0, backfill
preview = call(schedule_preview, body=PreviewSchedule.from_dict(
    {"cron": "30 2 * * *", "time_zone": "Europe/Berlin", "count": 3}))
assert len(preview.occurrences) == 3, preview
call(schedule_delete, schedule.id, occurrences="cancel")

call(stats_get)
forecast = call(forecast_get, topic=topic, from_="2030-01-31T00:00:00Z",
                to="2030-02-02T00:00:00Z", bucket="1d")
assert [b.at for b in forecast.buckets] == [
    "2030-01-31T00:00:00.000Z", "2030-02-01T00:00:00.000Z"], forecast
assert all(b.jobs >= 0 and b.projected >= 0 for b in forecast.buckets), forecast
# A payload schema set while a job is pending: the job is held when due,
# then released by force (sent as it is); the schema is removed again.
odd = call(job_create, body=CreateJob.from_dict(
    {"topic": topic, "payload": {"n": "x"}, "delay_ms": 2000}))
call(topic_modify, topic, body=PatchTopic.from_dict(
    {"payload_schema": {"type": "object", "properties": {"n": {"type": "number"}}}}))
deadline = time.time() + 20
while not job_get.sync(odd.id, client=client).held_at:
    assert time.time() < deadline, "the job is held within 20 s"
    time.sleep(0.1)
held = call(jobs_list, topic=topic, held=True)
assert [j.id for j in held.jobs] == [odd.id], held
released = call(job_release, odd.id, body=ReleaseJob.from_dict({"force": True}))
assert not released.held_at, released
call(topic_modify, topic, body=PatchTopic.from_dict({"payload_schema": None}))

call(topic_modify, topic, body=PatchTopic.from_dict({"max_per_second": 500}))
call(topic_pause, topic)
call(topic_get, topic)
call(topics_list)
call(topic_resume, topic)
audit = call(audit_list, action="topic", limit=10)
assert [e.action for e in audit.entries][:2] == ["topic.resume", "topic.pause"], audit

# Last: the clock of `tickler dev` (the server this runs against), a second on.
before = call(dev_clock_get)
moved = call(dev_clock_advance, body=ClockAdvance(advance_ms=1000))
assert moved.offset_ms == before.offset_ms + 1000 and moved.now > before.now, (before, moved)

print(json.dumps(driven))
