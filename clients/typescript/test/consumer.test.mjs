// The consumer kit: its pure parts, and (with TICKLER_URL set, as
// tests/consumer_kits.rs runs it) a handler against a live tickler that
// fails once, succeeds on the retry and sees a duplicate, leaving one `ok`.

import { test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import {
  Kit,
  MemorySeen,
  Outcome,
  RecordError,
  TopicReporter,
  jobRecordOf,
  outcomeOf,
  recordHeaders,
  reportOf,
} from "../dist/consumer.js";
import { TicklerClient } from "../dist/index.js";

const record = (headers) => ({
  topic: "billing", partition: 1, offset: 42n, key: Buffer.from("invoice-7"),
  value: Buffer.from('{"n": 7}'), headers: new Map(headers.map(([k, v]) => [Buffer.from(k), Buffer.from(v)])),
});

test("a record of tickler's parses into its job", () => {
  const job = jobRecordOf(record([
    ["h", "v"], ["tickler-job-id", "17"], ["tickler-attempt", "2"],
    ["tickler-scheduled-at", "1700000000000"], ["tickler-dispatched-at", "1700000000004"],
    ["tickler-correlation-id", "c-1"],
  ]));
  assert.equal(job.id, 17);
  assert.equal(job.attempt, 2);
  assert.equal(job.scheduledAtMs, 1700000000000);
  assert.equal(job.dispatchedAtMs, 1700000000004);
  assert.equal(job.correlationId, "c-1");
  assert.equal(job.scheduleId, undefined);
  assert.deepEqual(job.headers, [["h", Buffer.from("v")]]);
  assert.deepEqual(JSON.parse(job.payload.toString()), { n: 7 });
  assert.equal(recordHeaders(job).get("tickler-attempt"), "2");
});

test("a record without a job id is not tickler's, and bad headers are errors", () => {
  assert.equal(jobRecordOf(record([["h", "v"]])), undefined);
  assert.throws(() => jobRecordOf(record([["tickler-job-id", "17"], ["tickler-attempt", "two"]])),
    (err) => err instanceof RecordError && err.header === "tickler-attempt");
  assert.throws(() => jobRecordOf(record([["tickler-job-id", "17"], ["tickler-attempt", "1"]])),
    (err) => err instanceof RecordError && err.header === "tickler-scheduled-at");
});

test("outcomes are reports and read back", () => {
  const cases = [
    [Outcome.ok(), { job_id: 5, attempt: 3, outcome: "ok" }],
    [Outcome.retry("busy", 1500), { job_id: 5, attempt: 3, outcome: "retry", error: "busy", retry_after_ms: 1500 }],
    [Outcome.retry("busy"), { job_id: 5, attempt: 3, outcome: "retry", error: "busy" }],
    [Outcome.failed("bad card"), { job_id: 5, attempt: 3, outcome: "failed", error: "bad card" }],
  ];
  for (const [outcome, report] of cases) {
    assert.deepEqual(reportOf(outcome, 5, 3), report);
    assert.deepEqual(outcomeOf(report), outcome);
  }
  assert.equal(outcomeOf({ outcome: "maybe" }), undefined);
});

test("the memory store forgets the least recently used first", () => {
  const seen = new MemorySeen(2);
  seen.remember(1, 1, Outcome.ok());
  seen.remember(2, 1, Outcome.ok());
  assert.deepEqual(seen.outcome(1, 1), Outcome.ok());
  seen.remember(3, 1, Outcome.failed("x"));
  assert.equal(seen.outcome(2, 1), undefined);
  assert.deepEqual(seen.outcome(1, 1), Outcome.ok());
  assert.equal(seen.size, 2);
});

async function eventually(check, seconds = 60) {
  const deadline = Date.now() + seconds * 1000;
  while (Date.now() < deadline) {
    const found = await check();
    if (found) return found;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`not within ${seconds} s`);
}

const live = process.env.TICKLER_URL
  ? { timeout: 120_000 }
  : { skip: "needs a live tickler (tests/consumer_kits.rs)" };

test("the kit retries once, skips a duplicate and reports one ok", live, async () => {
  const { Admin, Consumer, Producer } = await import("@platformatic/kafka");
  const brokers = process.env.KAFKA_BROKERS.split(",");
  const topic = process.env.TICKLER_TOPIC;
  const tickler = TicklerClient.fromEnv();
  const groupId = `kit-ts-${randomUUID().slice(0, 8)}`;
  const key = `order-${randomUUID().slice(0, 8)}`;
  const events = [];
  const calls = [];
  const kit = new Kit({
    consumer: { clientId: "kit-test", bootstrapBrokers: brokers, groupId, maxWaitTime: 100 },
    topics: [topic],
    reporter: new TopicReporter(brokers, { topic: process.env.TICKLER_RESULTS_TOPIC }),
    onEvent: (event) => events.push(event),
  });
  const running = kit.run(async (job) => {
    calls.push(job);
    return job.attempt === 1 ? Outcome.retry("the first try fails", 100) : Outcome.ok();
  });
  let id;
  try {
    const job = await tickler.call("job_create", { body: {
      topic, key, payload: { order: 7 }, delay_ms: 0,
      expects_result: true, max_attempts: 3, ack_timeout_ms: 60000,
    } });
    id = job.id;
    await eventually(async () => (await tickler.call("job_get", { path: { id } })).status === "succeeded");
    const second = calls.findLast((c) => c.id === id);
    assert.deepEqual([second.id, second.attempt, second.key?.toString()], [id, 2, key]);
    assert.deepEqual(JSON.parse(second.payload.toString()), { order: 7 });
    // The retry's record again, as after a crash of tickler's.
    const producer = new Producer({ clientId: "kit-test", bootstrapBrokers: brokers });
    await producer.send({ messages: [{
      topic, key: second.key, value: second.payload,
      headers: new Map([...recordHeaders(second)].map(([k, v]) => [Buffer.from(k), Buffer.from(v)])),
    }] });
    await producer.close();
    await eventually(() => events.some((e) => e.kind === "duplicate" && e.id === id && e.attempt === 2));
  } finally {
    await kit.stop();
    await running;
  }
  assert.deepEqual(calls.filter((c) => c.id === id).map((c) => c.attempt), [1, 2], "the handler ran once per attempt");
  assert.deepEqual(
    events.filter((e) => e.kind === "handled" && e.id === id).map((e) => [e.attempt, e.outcome]),
    [[1, Outcome.retry("the first try fails", 100)], [2, Outcome.ok()]],
  );
  const history = await tickler.call("job_history", { path: { id } });
  assert.equal(history.events.filter((e) => e.status === "succeeded").length, 1, JSON.stringify(history));
  // The group committed past every record it reported.
  const admin = new Admin({ clientId: "kit-test", bootstrapBrokers: brokers });
  const [offsets] = await admin.listConsumerGroupOffsets({ groups: [groupId] }).then((groups) =>
    groups.map((g) => g.topics?.find((t) => t.name === topic)?.partitions ?? []));
  const check = new Consumer({ clientId: "kit-test", bootstrapBrokers: brokers, groupId: `${groupId}-check` });
  const ends = await check.listOffsets({ topics: [topic] });
  await check.close();
  await admin.close();
  for (const [partition, end] of ends.get(topic).entries()) {
    const committed = offsets.find((p) => p.partitionIndex === partition)?.committedOffset ?? -1n;
    assert.ok(committed === end || (end === 0n && committed < 0n), `partition ${partition}: committed ${committed}, end ${end}`);
  }
});
