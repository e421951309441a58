// The client's pure parts, by Node's own test runner, against the built
// package (`npm run build` first; tests/clients.rs runs both).

import { test } from "node:test";
import assert from "node:assert/strict";
import {
  ERROR_CODES,
  OPERATIONS,
  TicklerClient,
  TicklerError,
  pathFilled,
  queryString,
  retryAfterMs,
} from "../dist/index.js";

test("a path template takes its parameters escaped, and refuses a missing one", () => {
  assert.equal(pathFilled("/v1/jobs/{id}", { id: 42 }), "/v1/jobs/42");
  assert.equal(pathFilled("/v1/topics/{topic}", { topic: "a b/c" }), "/v1/topics/a%20b%2Fc");
  assert.throws(() => pathFilled("/v1/jobs/{id}", {}), /id is missing/);
});

test("a query string leaves out what is not set and repeats lists", () => {
  assert.equal(queryString({}), "");
  assert.equal(queryString({ topic: "t", limit: 10, cursor: undefined, held: false }), "?topic=t&limit=10&held=false");
  assert.equal(queryString({ status: ["pending", "dead"] }), "?status=pending&status=dead");
});

test("Retry-After is read as seconds or as a date, one second without it", () => {
  assert.equal(retryAfterMs("2"), 2_000);
  assert.equal(retryAfterMs(null), 1_000);
  assert.equal(retryAfterMs("soon"), 1_000);
  const now = Date.parse("2026-11-28T10:00:00Z");
  assert.equal(retryAfterMs("Sat, 28 Nov 2026 10:00:05 GMT", now), 5_000);
  assert.equal(retryAfterMs("Sat, 28 Nov 2026 09:00:00 GMT", now), 0);
});

test("every operation has a method, and the error codes are the documented ones", () => {
  const client = new TicklerClient({ url: "http://127.0.0.1:1/" });
  assert.equal(client.url, "http://127.0.0.1:1");
  for (const id of Object.keys(OPERATIONS)) {
    const method = id.replace(/_([a-z0-9])/g, (_, c) => c.toUpperCase());
    assert.equal(typeof client[method], "function", method);
  }
  assert.ok(ERROR_CODES.includes("version_conflict"));
  assert.equal(new TicklerError(409, "version_conflict", "m", {}).code, "version_conflict");
  assert.equal(new TicklerError(400, "something_new", "m", {}).code, undefined);
});

async function answers(list) {
  const calls = [];
  const fetch = async (url, init) => {
    calls.push({ url, init });
    const [status, body, headers] = list.shift();
    return new Response(JSON.stringify(body), { status, headers });
  };
  return { fetch, calls };
}

test("a 429 is tried again after Retry-After; quota_exceeded and retries 0 are thrown at once", async () => {
  const limited = [429, { error: { code: "rate_limited", message: "slow down" } }, { "retry-after": "0" }];
  const { fetch, calls } = await answers([limited, limited, [200, { topics: [] }, {}]]);
  const client = new TicklerClient({ url: "http://t", token: "s", fetch });
  assert.deepEqual(await client.topicsList({}), { topics: [] });
  assert.equal(calls.length, 3);
  assert.equal(calls[0].init.headers.authorization, "Bearer s");

  const quota = [429, { error: { code: "quota_exceeded", message: "no" } }, { "retry-after": "0" }];
  const once = await answers([quota, [200, {}, {}]]);
  const strict = new TicklerClient({ url: "http://t", fetch: once.fetch });
  await assert.rejects(strict.topicsList({}), (err) => err instanceof TicklerError && err.code === "quota_exceeded");
  assert.equal(once.calls.length, 1);

  const hasty = await answers([limited, [200, {}, {}]]);
  const impatient = new TicklerClient({ url: "http://t", fetch: hasty.fetch, retries: 0 });
  await assert.rejects(impatient.topicsList({}), (err) => err.status === 429 && err.code === "rate_limited");
});

test("a wait before a retry ends when the call is cancelled", async () => {
  // Not cancelled, the wait would end in the 200 that follows.
  const limited = [503, { error: { code: "unavailable", message: "later" } }, { "retry-after": "20" }];
  const { fetch, calls } = await answers([limited, [200, {}, {}]]);
  const client = new TicklerClient({ url: "http://t", fetch });
  await assert.rejects(
    client.statsGet({}, { signal: AbortSignal.timeout(100) }),
    (err) => err.name === "TimeoutError",
  );
  assert.equal(calls.length, 1);
});

test("a body is sent as JSON and the path and query are filled", async () => {
  const { fetch, calls } = await answers([[201, { id: 7 }, {}]]);
  const client = new TicklerClient({ url: "http://t/", fetch });
  await client.jobModify({ path: { id: 7 }, body: { version: 2, delay_ms: 5 } }, { headers: { "x-a": "b" } });
  assert.equal(calls[0].url, "http://t/v1/jobs/7");
  assert.equal(calls[0].init.method, "PATCH");
  assert.equal(calls[0].init.headers["content-type"], "application/json");
  assert.equal(calls[0].init.headers["x-a"], "b");
  assert.deepEqual(JSON.parse(calls[0].init.body), { version: 2, delay_ms: 5 });
});
