// The consumer kit (`tickler-client/consumer`): the glue between tickler's
// records and your handler, written once. Kafka through @platformatic/kafka
// (a peer dependency: `npm install @platformatic/kafka`), a maintained
// client written in TypeScript with no native addon.
//
// For each record: its headers are parsed into a `JobRecord`; a (job id,
// attempt) handled before is not handed to the handler again (its first
// outcome is reported again, which tickler ignores as `finished` or applies
// if the first report was lost); the handler's `Outcome` is remembered, then
// reported for the record's own attempt (on the results topic, acknowledged
// by every in-sync replica, or over HTTP); only then is the record's offset
// committed. A crash before the commit hands the record over again, and the
// steps above make that harmless with a store that outlives the process
// (`SeenStore`; the default `MemorySeen` forgets on restart).
//
// Records are handled one at a time, in order: run more consumers in the
// group for more throughput.

import { Consumer, Producer, ProduceAcks, stringSerializers } from "@platformatic/kafka";
import type { ConsumerOptions, Message, MessagesStream } from "@platformatic/kafka";

import { TicklerClient, TicklerError } from "./index.js";

const TICKLER_HEADERS = [
  "tickler-job-id",
  "tickler-attempt",
  "tickler-scheduled-at",
  "tickler-dispatched-at",
  "tickler-correlation-id",
  "tickler-schedule-id",
];

/** One delivery of a job: a record tickler produced, its headers parsed. */
export interface JobRecord {
  /** `tickler-job-id`. */
  id: number;
  /** `tickler-attempt`, from 1: the attempt to report. */
  attempt: number;
  /** `tickler-scheduled-at`, ms since the epoch: the time asked for. */
  scheduledAtMs: number;
  /** `tickler-dispatched-at`, ms since the epoch: when tickler sent it. */
  dispatchedAtMs: number;
  /** `tickler-correlation-id`, when the job carried one. */
  correlationId: string | undefined;
  /** `tickler-schedule-id`, on an occurrence of a recurring schedule. */
  scheduleId: number | undefined;
  topic: string;
  partition: number;
  offset: bigint;
  key: Buffer | undefined;
  payload: Buffer;
  /** The job's own headers; tickler's are the fields above. */
  headers: [string, Buffer][];
}

/** A record whose tickler headers do not parse. */
export class RecordError extends Error {
  readonly header: string;
  constructor(header: string, problem: string) {
    super(`header ${header}: ${problem}`);
    this.name = "RecordError";
    this.header = header;
  }
}

/**
 * A record as a job's delivery: `undefined` for a record that is not
 * tickler's (no `tickler-job-id`); throws `RecordError` when its tickler
 * headers do not parse.
 */
export function jobRecordOf(record: {
  topic: string;
  partition: number;
  offset: bigint;
  key?: Buffer | null;
  value?: Buffer | null;
  headers: Iterable<[Buffer | string, Buffer | string | null | undefined]>;
}): JobRecord | undefined {
  const all: [string, Buffer][] = [];
  for (const [name, value] of record.headers) {
    all.push([String(name), Buffer.isBuffer(value) ? value : Buffer.from(value ?? "")]);
  }
  const text = (name: string): string | undefined => {
    const found = all.find(([key]) => key === name);
    if (!found) return undefined;
    try {
      return new TextDecoder("utf-8", { fatal: true }).decode(found[1]).trim();
    } catch {
      throw new RecordError(name, "not UTF-8");
    }
  };
  const number = (name: string, required: boolean): number | undefined => {
    const value = text(name);
    if (value === undefined) {
      if (required) throw new RecordError(name, "missing");
      return undefined;
    }
    if (!/^[0-9]+$/.test(value) || !Number.isSafeInteger(Number(value))) {
      throw new RecordError(name, `${JSON.stringify(value)} is not a number`);
    }
    return Number(value);
  };
  if (text("tickler-job-id") === undefined) return undefined;
  const id = number("tickler-job-id", true)!;
  const attempt = number("tickler-attempt", true)!;
  if (attempt < 1) throw new RecordError("tickler-attempt", "missing");
  return {
    id,
    attempt,
    scheduledAtMs: number("tickler-scheduled-at", true)!,
    dispatchedAtMs: number("tickler-dispatched-at", true)!,
    correlationId: text("tickler-correlation-id"),
    scheduleId: number("tickler-schedule-id", false),
    topic: record.topic,
    partition: record.partition,
    offset: record.offset,
    key: record.key ?? undefined,
    payload: record.value ?? Buffer.alloc(0),
    headers: all.filter(([name]) => !TICKLER_HEADERS.includes(name)),
  };
}

/** The record's headers as tickler writes them (for tests that deliver a job's record themselves: a duplicate, say). */
export function recordHeaders(job: JobRecord): Map<string, string | Buffer> {
  const headers = new Map<string, string | Buffer>(job.headers);
  headers.set("tickler-job-id", String(job.id));
  headers.set("tickler-attempt", String(job.attempt));
  headers.set("tickler-scheduled-at", String(job.scheduledAtMs));
  headers.set("tickler-dispatched-at", String(job.dispatchedAtMs));
  if (job.correlationId !== undefined) headers.set("tickler-correlation-id", job.correlationId);
  if (job.scheduleId !== undefined) headers.set("tickler-schedule-id", String(job.scheduleId));
  return headers;
}

/** What became of a delivery: the report the kit sends for its attempt. */
export type Outcome =
  | { outcome: "ok" }
  | { outcome: "retry"; error: string; retryAfterMs?: number }
  | { outcome: "failed"; error: string };

export const Outcome = {
  /** Done: the job is `succeeded`. */
  ok: (): Outcome => ({ outcome: "ok" }),
  /** Again after `retryAfterMs` (at most 30 days), or the job's backoff; `dead` when it has no attempt left. */
  retry: (error: string, retryAfterMs?: number): Outcome =>
    retryAfterMs === undefined ? { outcome: "retry", error } : { outcome: "retry", error, retryAfterMs },
  /** Dead at once, with `error` as its `last_error`. */
  failed: (error: string): Outcome => ({ outcome: "failed", error }),
};

/** The report of `attempt` of job `id` (docs/results.md). */
export function reportOf(outcome: Outcome, id: number, attempt: number): Record<string, unknown> {
  const report: Record<string, unknown> = { job_id: id, attempt, outcome: outcome.outcome };
  if (outcome.outcome !== "ok") report.error = outcome.error;
  if (outcome.outcome === "retry" && outcome.retryAfterMs !== undefined) {
    report.retry_after_ms = outcome.retryAfterMs;
  }
  return report;
}

/** A report read back (from a store that keeps them as JSON); `undefined` when it is not one. */
export function outcomeOf(report: Record<string, unknown>): Outcome | undefined {
  const error = typeof report.error === "string" ? report.error : "";
  switch (report.outcome) {
    case "ok":
      return Outcome.ok();
    case "retry":
      return Outcome.retry(error, typeof report.retry_after_ms === "number" ? report.retry_after_ms : undefined);
    case "failed":
      return Outcome.failed(error);
    default:
      return undefined;
  }
}

/**
 * Where the kit remembers which (job id, attempt) it handled, and how.
 *
 * The default, `MemorySeen`, forgets on restart: a record delivered again
 * after a crash is then handled again. A store that outlives the process
 * closes that gap — in Redis, `SET tickler:seen:{id}:{attempt} <report> EX
 * 604800` and `GET`; in SQL, a table keyed by `(job_id, attempt)` holding
 * the report, written with an insert-or-ignore. Throw to have the kit wait
 * and ask again: it never hands a record to the handler without knowing
 * whether it was handled.
 */
export interface SeenStore {
  outcome(id: number, attempt: number): Promise<Outcome | undefined> | Outcome | undefined;
  remember(id: number, attempt: number, outcome: Outcome): Promise<void> | void;
}

/** The last `capacity` attempts handled, the least recently used forgotten first. */
export class MemorySeen implements SeenStore {
  readonly capacity: number;
  #entries = new Map<string, Outcome>();

  constructor(capacity = 100_000) {
    this.capacity = Math.max(1, capacity);
  }

  get size(): number {
    return this.#entries.size;
  }

  outcome(id: number, attempt: number): Outcome | undefined {
    const key = `${id}:${attempt}`;
    const found = this.#entries.get(key);
    if (found !== undefined) {
      // A Map keeps insertion order: moved to the end, it is the newest.
      this.#entries.delete(key);
      this.#entries.set(key, found);
    }
    return found;
  }

  remember(id: number, attempt: number, outcome: Outcome): void {
    const key = `${id}:${attempt}`;
    this.#entries.delete(key);
    this.#entries.set(key, outcome);
    while (this.#entries.size > this.capacity) {
      const oldest = this.#entries.keys().next().value;
      if (oldest === undefined) break;
      this.#entries.delete(oldest);
    }
  }
}

/** tickler refused a report for good (an unknown job, say). */
export class Refused extends Error {
  constructor(message: string) {
    super(message);
    this.name = "Refused";
  }
}

/** Where reports go. `send` throws when the report may not have arrived (it is sent again), `Refused` when tickler refused it for good. */
export interface Reporter {
  send(id: number, report: Record<string, unknown>): Promise<void>;
  close?(): Promise<void>;
}

export interface TopicReporterOptions {
  /** The results topic (`results.topic`); `tickler.results` by default. */
  topic?: string;
  clientId?: string;
  /**
   * An idempotent producer (off by default). A report the producer's retry
   * writes twice is harmless — tickler ignores the second as `finished` or
   * `stale_attempt` — so the kit does not need it; turn it on where the
   * cluster supports it and you want the topic free of repeats.
   */
  idempotent?: boolean;
}

/** Reports on the results topic, keyed by job id, each acknowledged by every in-sync replica before the record's offset is committed. */
export class TopicReporter implements Reporter {
  readonly topic: string;
  #producer: Producer<string, string, string, string>;

  constructor(bootstrapBrokers: string[], options: TopicReporterOptions = {}) {
    this.topic = options.topic ?? "tickler.results";
    this.#producer = new Producer({
      clientId: options.clientId ?? "tickler-kit",
      bootstrapBrokers,
      serializers: stringSerializers,
      idempotent: options.idempotent ?? false,
      acks: ProduceAcks.ALL,
    });
  }

  async send(id: number, report: Record<string, unknown>): Promise<void> {
    await this.#producer.send({
      messages: [{ topic: this.topic, key: String(id), value: JSON.stringify(report) }],
    });
  }

  async close(): Promise<void> {
    await this.#producer.close();
  }
}

/** Reports with `POST /v1/jobs/{id}/result` (a token with `results`). */
export class ApiReporter implements Reporter {
  #client: TicklerClient;

  constructor(client: TicklerClient) {
    this.#client = client;
  }

  async send(id: number, report: Record<string, unknown>): Promise<void> {
    try {
      await this.#client.call("job_result_report", {
        path: { id },
        body: report as never,
      });
    } catch (err) {
      // Only an unknown job (404) or an unreadable report (400) is refused
      // for good; a refused token or a server in trouble is waited for.
      if (err instanceof TicklerError && (err.status === 404 || err.status === 400)) {
        throw new Refused(err.message);
      }
      throw err;
    }
  }
}

/** No reports: for jobs that expect none (deduplication only). */
export class NoReporter implements Reporter {
  async send(): Promise<void> {}
}

const STOPPED = Symbol("stopped");

/** What the kit did with a record, for logs and metrics. */
export type KitEvent =
  | { kind: "handled"; id: number; attempt: number; outcome: Outcome }
  | { kind: "duplicate"; id: number; attempt: number }
  | { kind: "skipped"; topic: string; partition: number; offset: bigint; why: string }
  | { kind: "refused"; id: number; attempt: number; why: string }
  | { kind: "trouble"; what: string; waitMs: number };

export interface KitOptions {
  /** @platformatic/kafka's consumer options (`bootstrapBrokers`, `groupId`, `clientId`…); `autocommit` is the kit's (off: it commits each record once reported). */
  consumer: Omit<ConsumerOptions<Buffer, Buffer, Buffer, Buffer>, "autocommit">;
  topics: string[];
  reporter: Reporter;
  seen?: SeenStore;
  onEvent?: (event: KitEvent) => void;
  /** Where a new group starts: `earliest` (the default) or `latest`. */
  from?: "earliest" | "latest";
}

/** A consumer of tickler's records around a handler: see the top of this file. */
export class Kit {
  readonly seen: SeenStore;
  #options: KitOptions;
  #consumer: Consumer<Buffer, Buffer, Buffer, Buffer>;
  #stream: MessagesStream<Buffer, Buffer, Buffer, Buffer> | undefined;
  #stopped = false;
  #busy = false;

  constructor(options: KitOptions) {
    this.#options = options;
    this.seen = options.seen ?? new MemorySeen();
    this.#consumer = new Consumer({ ...options.consumer, autocommit: false });
  }

  /** Hands each record to `handler` until `stop()`; a record is finished (reported, committed) before the next is read. */
  async run(handler: (job: JobRecord) => Promise<Outcome> | Outcome): Promise<void> {
    this.#stream = await this.#consumer.consume({
      topics: this.#options.topics,
      mode: this.#options.from ?? "earliest",
    });
    try {
      for await (const message of this.#stream) {
        this.#busy = true;
        try {
          // A stop while the record waits for its store or its report
          // leaves it uncommitted: it is handed over again.
          if (!(await this.#process(message, handler))) break;
          // Commits are cumulative: one that fails (a rebalance took the
          // partition) is covered by the next, or the record is handed
          // over again and found in the store.
          await (message.commit() as Promise<void>).catch((err: Error) =>
            this.#emit({ kind: "trouble", what: `committing: ${err.message}`, waitMs: 0 }),
          );
        } finally {
          this.#busy = false;
        }
        if (this.#stopped) break;
      }
    } finally {
      await this.#stream.close().catch(() => {});
      await this.#consumer.close().catch(() => {});
      await this.#options.reporter.close?.().catch(() => {});
    }
  }

  /** Ends `run` after the record in hand (one waiting for a store or a report that keeps failing is left uncommitted). */
  async stop(): Promise<void> {
    this.#stopped = true;
    if (!this.#busy) await this.#stream?.close();
  }

  async #process(
    message: Message<Buffer, Buffer, Buffer, Buffer>,
    handler: (job: JobRecord) => Promise<Outcome> | Outcome,
  ): Promise<boolean> {
    let job: JobRecord | undefined;
    try {
      job = jobRecordOf(message);
    } catch (err) {
      this.#skipped(message, String((err as Error).message));
      return true;
    }
    if (job === undefined) {
      this.#skipped(message, "not a record of tickler's (no tickler-job-id)");
      return true;
    }
    const { id, attempt } = job;
    const read = await this.#patiently("reading the store", () => this.seen.outcome(id, attempt));
    if (read === STOPPED) return false;
    const earlier = read;
    let outcome: Outcome;
    if (earlier !== undefined) {
      this.#emit({ kind: "duplicate", id, attempt });
      outcome = earlier;
    } else {
      outcome = await handler(job);
      // Remembered before it is reported: a crash between the two reports
      // it again instead of handling it again.
      const written = await this.#patiently("writing the store", () => this.seen.remember(id, attempt, outcome));
      if (written === STOPPED) return false;
    }
    try {
      const sent = await this.#patiently("reporting", () =>
        this.#options.reporter.send(id, reportOf(outcome, id, attempt)),
      );
      if (sent === STOPPED) return false;
    } catch (err) {
      if (!(err instanceof Refused)) throw err;
      this.#emit({ kind: "refused", id, attempt, why: err.message });
      return true;
    }
    if (earlier === undefined) this.#emit({ kind: "handled", id, attempt, outcome });
    return true;
  }

  /** `step` until it succeeds, waiting longer each time (up to 5 s); `STOPPED` once `stop()` is called. */
  async #patiently<T>(what: string, step: () => Promise<T> | T): Promise<T | typeof STOPPED> {
    let waitMs = 100;
    for (;;) {
      try {
        return await step();
      } catch (err) {
        if (err instanceof Refused) throw err;
        this.#emit({ kind: "trouble", what: `${what}: ${(err as Error).message}`, waitMs });
        // Checked every 100 ms, so a stop is not kept waiting for the longest pause.
        for (let waited = 0; waited < waitMs; waited += 100) {
          if (this.#stopped) return STOPPED;
          await new Promise((resolve) => setTimeout(resolve, 100));
        }
        waitMs = Math.min(waitMs * 2, 5000);
      }
    }
  }

  #skipped(message: Message<Buffer, Buffer, Buffer, Buffer>, why: string): void {
    this.#emit({ kind: "skipped", topic: message.topic, partition: message.partition, offset: message.offset, why });
  }

  #emit(event: KitEvent): void {
    this.#options.onEvent?.(event);
  }
}
