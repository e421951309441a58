"""A consumer kit: the glue between tickler's records and your handler,
written once (needs confluent-kafka: ``pip install "tickler-client[consumer]"``).

    from tickler_client.consumer import Kit, Outcome, TopicReporter

    def charge(job):
        try:
            billing.charge(job.json()["invoice"])
            return Outcome.ok()
        except billing.Busy as e:
            return Outcome.retry(str(e), after_ms=30_000)

    kit = Kit({"bootstrap.servers": "127.0.0.1:9092", "group.id": "billing"},
              ["billing.charge"], TopicReporter("127.0.0.1:9092", "tickler.results"))
    kit.run(charge)

For each record: its headers are parsed into a `JobRecord`; a (job id,
attempt) handled before is not handed to the handler again (its first
outcome is reported again, which tickler ignores as ``finished`` or applies
if the first report was lost); the handler's `Outcome` is remembered, then
reported for the record's own attempt (on the results topic, acknowledged
by every in-sync replica, or over HTTP); only then is the record's offset
stored for the next commit. A crash before the commit hands the record over
again, and the steps above make that harmless with a store that outlives
the process (`SeenStore`; the default `MemorySeen` forgets on restart).

Records are handled one at a time, in order: run more consumers in the
group for more throughput. Written by hand, not generated.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Protocol, Tuple

_TICKLER_HEADERS = (
    "tickler-job-id",
    "tickler-attempt",
    "tickler-scheduled-at",
    "tickler-dispatched-at",
    "tickler-correlation-id",
    "tickler-schedule-id",
)


class RecordError(ValueError):
    """A record whose tickler headers do not parse."""

    def __init__(self, header: str, problem: str):
        super().__init__(f"header {header}: {problem}")
        self.header = header
        self.problem = problem


@dataclass(frozen=True)
class JobRecord:
    """One delivery of a job: a record tickler produced, its headers parsed."""

    id: int
    attempt: int
    scheduled_at_ms: int
    dispatched_at_ms: int
    correlation_id: Optional[str]
    schedule_id: Optional[int]
    topic: str
    partition: int
    offset: int
    key: Optional[bytes]
    payload: bytes
    headers: List[Tuple[str, bytes]] = field(default_factory=list)
    """The job's own headers; tickler's are the fields above."""

    @staticmethod
    def parse(message: Any) -> Optional["JobRecord"]:
        """A confluent-kafka message as a job's delivery: None when it is not
        tickler's (no ``tickler-job-id``); `RecordError` when its tickler
        headers do not parse."""
        return JobRecord.from_parts(
            message.topic(),
            message.partition(),
            message.offset(),
            message.key(),
            message.value() or b"",
            list(message.headers() or []),
        )

    @staticmethod
    def from_parts(
        topic: str,
        partition: int,
        offset: int,
        key: Optional[bytes],
        payload: bytes,
        headers: List[Tuple[str, Optional[bytes]]],
    ) -> Optional["JobRecord"]:
        """`parse`, from a record's parts."""

        def text(name: str) -> Optional[str]:
            for key_, value in headers:
                if key_ == name:
                    try:
                        return (value or b"").decode("utf-8").strip()
                    except UnicodeDecodeError:
                        raise RecordError(name, "not UTF-8") from None
            return None

        def number(name: str, required: bool = True) -> Optional[int]:
            value = text(name)
            if value is None:
                if required:
                    raise RecordError(name, "missing")
                return None
            if not value.lstrip("-").isdigit():
                raise RecordError(name, f"{value!r} is not a number")
            return int(value)

        if text("tickler-job-id") is None:
            return None
        job_id = number("tickler-job-id")
        attempt = number("tickler-attempt")
        if job_id is None or job_id < 0:
            raise RecordError("tickler-job-id", "not a job id")
        if attempt is None or attempt < 1:
            raise RecordError("tickler-attempt", "missing")
        own = [(k, v or b"") for k, v in headers if k not in _TICKLER_HEADERS]
        return JobRecord(
            id=job_id,
            attempt=attempt,
            scheduled_at_ms=number("tickler-scheduled-at") or 0,
            dispatched_at_ms=number("tickler-dispatched-at") or 0,
            correlation_id=text("tickler-correlation-id"),
            schedule_id=number("tickler-schedule-id", required=False),
            topic=topic,
            partition=partition,
            offset=offset,
            key=key,
            payload=payload,
            headers=own,
        )

    def json(self) -> Any:
        """The payload as JSON."""
        return json.loads(self.payload)

    def header(self, name: str) -> Optional[str]:
        """One of the job's own headers, as text."""
        for key, value in self.headers:
            if key == name:
                return value.decode("utf-8", "replace")
        return None

    def record_headers(self) -> List[Tuple[str, bytes]]:
        """The record's headers as tickler writes them (for tests that
        deliver a job's record themselves: a duplicate, say)."""
        headers = list(self.headers)
        headers += [
            ("tickler-job-id", str(self.id).encode()),
            ("tickler-attempt", str(self.attempt).encode()),
            ("tickler-scheduled-at", str(self.scheduled_at_ms).encode()),
            ("tickler-dispatched-at", str(self.dispatched_at_ms).encode()),
        ]
        if self.correlation_id is not None:
            headers.append(("tickler-correlation-id", self.correlation_id.encode()))
        if self.schedule_id is not None:
            headers.append(("tickler-schedule-id", str(self.schedule_id).encode()))
        return headers


@dataclass(frozen=True)
class Outcome:
    """What became of a delivery: the report the kit sends for its attempt."""

    outcome: str
    error: Optional[str] = None
    retry_after_ms: Optional[int] = None

    @staticmethod
    def ok() -> "Outcome":
        """Done: the job is ``succeeded``."""
        return Outcome("ok")

    @staticmethod
    def retry(error: str, after_ms: Optional[int] = None) -> "Outcome":
        """Again after `after_ms` (at most 30 days), or the job's backoff;
        ``dead`` when it has no attempt left."""
        return Outcome("retry", error, after_ms)

    @staticmethod
    def failed(error: str) -> "Outcome":
        """Dead at once, with `error` as its ``last_error``."""
        return Outcome("failed", error)

    def report(self, job_id: int, attempt: int) -> Dict[str, Any]:
        """The report of `attempt` of job `job_id` (docs/results.md)."""
        report: Dict[str, Any] = {"job_id": job_id, "attempt": attempt, "outcome": self.outcome}
        if self.error is not None and self.outcome != "ok":
            report["error"] = self.error
        if self.retry_after_ms is not None and self.outcome == "retry":
            report["retry_after_ms"] = int(self.retry_after_ms)
        return report

    @staticmethod
    def from_report(report: Dict[str, Any]) -> Optional["Outcome"]:
        """A report read back (from a store that keeps them as JSON)."""
        kind = report.get("outcome")
        if kind == "ok":
            return Outcome.ok()
        if kind == "retry":
            return Outcome.retry(report.get("error") or "", report.get("retry_after_ms"))
        if kind == "failed":
            return Outcome.failed(report.get("error") or "")
        return None


class SeenStore(Protocol):
    """Where the kit remembers which (job id, attempt) it handled, and how.

    The default, `MemorySeen`, forgets on restart: a record delivered again
    after a crash is then handled again. A store that outlives the process
    closes that gap — in Redis, ``SET tickler:seen:{id}:{attempt} <report>
    EX 604800`` and ``GET``; in SQL, a table keyed by ``(job_id, attempt)``
    holding the report, written with an insert-or-ignore. Raise to have the
    kit wait and ask again: it never hands a record to the handler without
    knowing whether it was handled."""

    def outcome(self, job_id: int, attempt: int) -> Optional[Outcome]: ...

    def remember(self, job_id: int, attempt: int, outcome: Outcome) -> None: ...


class MemorySeen:
    """The last `capacity` attempts handled, the least recently used
    forgotten first."""

    def __init__(self, capacity: int = 100_000):
        self.capacity = max(1, capacity)
        self._entries: "OrderedDict[Tuple[int, int], Outcome]" = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def outcome(self, job_id: int, attempt: int) -> Optional[Outcome]:
        with self._lock:
            found = self._entries.get((job_id, attempt))
            if found is not None:
                self._entries.move_to_end((job_id, attempt))
            return found

    def remember(self, job_id: int, attempt: int, outcome: Outcome) -> None:
        with self._lock:
            self._entries[(job_id, attempt)] = outcome
            self._entries.move_to_end((job_id, attempt))
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)


class _Stopped(Exception):
    """The kit was stopped while waiting for a store or a report."""


class Refused(Exception):
    """tickler refused a report for good (an unknown job, say)."""


class TopicReporter:
    """Reports on the results topic (``results.topic``, default
    ``tickler.results``), each keyed by its job id, through an idempotent
    producer acknowledged by every in-sync replica."""

    def __init__(self, brokers_or_config: Any, topic: str = "tickler.results"):
        from confluent_kafka import Producer

        config = (
            dict(brokers_or_config)
            if isinstance(brokers_or_config, dict)
            else {"bootstrap.servers": brokers_or_config}
        )
        config.update({"enable.idempotence": True, "acks": "all"})
        self.topic = topic
        self._producer = Producer(config)

    def send(self, job_id: int, report: Dict[str, Any]) -> None:
        """Sends `report` and waits for the broker's acknowledgement;
        raises when it may not have arrived."""
        outcome: Dict[str, Any] = {}

        def delivered(err: Any, _message: Any) -> None:
            outcome["error"] = err
            outcome["done"] = True

        self._producer.produce(
            self.topic, key=str(job_id), value=json.dumps(report), on_delivery=delivered
        )
        deadline = time.monotonic() + 30
        while "done" not in outcome and time.monotonic() < deadline:
            self._producer.poll(0.1)
        if "done" not in outcome:
            raise TimeoutError(f"no acknowledgement from {self.topic} in 30 s")
        if outcome["error"] is not None:
            raise RuntimeError(f"producing to {self.topic}: {outcome['error']}")


class ApiReporter:
    """Reports with ``POST /v1/jobs/{id}/result`` (a token with
    ``results``), through this package's `AuthenticatedClient`."""

    def __init__(self, client: Any):
        self._client = client

    def send(self, job_id: int, report: Dict[str, Any]) -> None:
        response = self._client.get_httpx_client().post(
            f"/v1/jobs/{job_id}/result", json=report
        )
        # Only an unknown job (404) or an unreadable report (400) is refused
        # for good; a refused token or a server in trouble is waited for.
        if response.status_code in (400, 404):
            raise Refused(f"{response.status_code} {response.text[:300]}")
        if response.status_code >= 300:
            raise RuntimeError(f"POST /v1/jobs/{job_id}/result: {response.status_code}")


class NoReporter:
    """No reports: for jobs that expect none (deduplication only)."""

    def send(self, job_id: int, report: Dict[str, Any]) -> None:
        return None


@dataclass(frozen=True)
class Event:
    """What the kit did with a record, for logs and metrics: `kind` is
    ``handled`` (with `outcome`), ``duplicate``, ``skipped`` (with `why`: not
    tickler's, or its headers do not parse), ``refused`` (tickler refused
    the report for good) or ``trouble`` (a report or the store failed;
    tried again)."""

    kind: str
    job_id: Optional[int] = None
    attempt: Optional[int] = None
    outcome: Optional[Outcome] = None
    why: Optional[str] = None


class Kit:
    """A consumer of tickler's records around a handler: see the module."""

    def __init__(
        self,
        config: Dict[str, Any],
        topics: List[str],
        reporter: Any,
        seen: Optional[SeenStore] = None,
        on_event: Optional[Callable[[Event], None]] = None,
    ):
        """`config` is confluent-kafka's (``bootstrap.servers``,
        ``group.id``…). The kit stores each offset itself once its record is
        reported (``enable.auto.offset.store`` off), so the periodic commit
        never passes an unreported record."""
        from confluent_kafka import Consumer

        config = dict(config)
        config.update({"enable.auto.offset.store": False, "enable.auto.commit": True})
        self._consumer = Consumer(config)
        self._consumer.subscribe(list(topics))
        self.reporter = reporter
        self.seen: SeenStore = seen if seen is not None else MemorySeen()
        self._on_event = on_event
        self._stop = threading.Event()

    def run(self, handler: Callable[[JobRecord], Outcome], stop: Optional[threading.Event] = None) -> None:
        """Hands each record to `handler` until `stop` is set, then commits
        what was reported and closes the consumer. A record is finished
        (reported, its offset stored) before the next is read; one waiting
        for a store or a report that keeps failing when `stop` is set is
        left uncommitted (handed over again)."""
        stop = stop or threading.Event()
        self._stop = stop
        try:
            while not stop.is_set():
                message = self._consumer.poll(0.2)
                if message is None:
                    continue
                if message.error() is not None:
                    self._emit(Event("trouble", why=f"consuming: {message.error()}"))
                    continue
                if not self._process(message, handler):
                    break  # stopped while waiting: left uncommitted, handed over again
                try:
                    self._consumer.store_offsets(message=message)
                except Exception as err:  # a rebalance took the partition
                    self._emit(Event("trouble", why=f"storing the offset: {err}"))
            try:
                self._consumer.commit(asynchronous=False)
            except Exception as err:  # nothing stored since the last commit
                if "NO_OFFSET" not in str(err):
                    raise
        finally:
            self._consumer.close()

    def _process(self, message: Any, handler: Callable[[JobRecord], Outcome]) -> bool:
        try:
            return self._handle(message, handler)
        except _Stopped:
            return False

    def _handle(self, message: Any, handler: Callable[[JobRecord], Outcome]) -> bool:
        try:
            job = JobRecord.parse(message)
        except RecordError as err:
            self._emit(Event("skipped", why=str(err)))
            return True
        if job is None:
            self._emit(Event("skipped", why="not a record of tickler's (no tickler-job-id)"))
            return True
        earlier = self._patiently("reading the store", lambda: self.seen.outcome(job.id, job.attempt))
        if earlier is not None:
            self._emit(Event("duplicate", job.id, job.attempt))
            outcome = earlier
        else:
            outcome = handler(job)
            # Remembered before it is reported: a crash between the two
            # reports it again instead of handling it again.
            self._patiently("writing the store", lambda: self.seen.remember(job.id, job.attempt, outcome))
        try:
            self._patiently("reporting", lambda: self.reporter.send(job.id, outcome.report(job.id, job.attempt)))
        except Refused as why:
            self._emit(Event("refused", job.id, job.attempt, outcome, str(why)))
            return True
        if earlier is None:
            self._emit(Event("handled", job.id, job.attempt, outcome))
        return True

    def _patiently(self, what: str, step: Callable[[], Any]) -> Any:
        wait = 0.1
        while True:
            try:
                return step()
            except Refused:
                raise
            except Exception as err:
                self._emit(Event("trouble", why=f"{what}: {err}"))
                if self._stop.wait(wait):
                    raise _Stopped() from None
                wait = min(wait * 2, 5.0)

    def _emit(self, event: Event) -> None:
        if self._on_event is not None:
            self._on_event(event)
