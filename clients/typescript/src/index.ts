// tickler's TypeScript client: every operation of the API, typed from its
// OpenAPI document; no runtime dependency beyond Node 20 (fetch).

import type { Answer, Args, CallOptions } from "./call.js";
import {
  ERROR_CODES,
  OPERATIONS,
  Operations,
  type ErrorCode,
  type OperationId,
} from "./operations.js";

export type { Answer, Args, CallOptions } from "./call.js";
export { API_VERSION, ERROR_CODES, OPERATIONS, type ErrorCode, type OperationId } from "./operations.js";
export type { components, operations, paths } from "./schema.js";

/** Longest a `Retry-After` is waited for; a longer one is the error. */
const RETRY_AFTER_MAX_MS = 30_000;

/** How a {@link TicklerClient} is set up. */
export interface ClientOptions {
  /** The API's base URL, e.g. `http://localhost:8080` (`TICKLER_URL`). */
  url: string;
  /** A bearer token (`TICKLER_TOKEN`); none for `auth = "none"`. */
  token?: string;
  /**
   * How many times a 429 or 503 is tried again after its `Retry-After`
   * (default 3). A 429 `quota_exceeded` is never tried again.
   */
  retries?: number;
  /** The fetch to use (default: Node's own). */
  fetch?: typeof fetch;
}

/**
 * An answer of the API that is not a success: its HTTP status, its stable
 * `code` (docs/api.md, "Errors"), its message and the whole body (a 409
 * carries the job as it is now). A call that never got an answer (the
 * server unreachable, or the call cancelled) throws the underlying error
 * instead.
 */
export class TicklerError extends Error {
  readonly status: number;
  /** The error's code as the API sent it. */
  readonly codeText: string;
  /** The code, when it is one the API documents. */
  readonly code: ErrorCode | undefined;
  readonly body: unknown;

  constructor(status: number, codeText: string, message: string, body: unknown) {
    super(`${status} ${codeText || "error"}: ${message}`);
    this.name = "TicklerError";
    this.status = status;
    this.codeText = codeText;
    this.code = (ERROR_CODES as readonly string[]).includes(codeText)
      ? (codeText as ErrorCode)
      : undefined;
    this.body = body;
  }
}

/**
 * A client of tickler's API. Every operation is a method named after its
 * operationId (`jobCreate`, `jobGet`, `jobsBulkCreate`, …), or
 * `call("job_create", …)`; each takes `{ path, query, body }` as the API's
 * document types them, and resolves to the answer's JSON.
 */
export class TicklerClient extends Operations {
  readonly url: string;
  readonly #token: string | undefined;
  readonly #retries: number;
  readonly #fetch: typeof fetch;

  constructor(options: ClientOptions) {
    super();
    this.url = options.url.replace(/\/+$/, "");
    this.#token = options.token;
    this.#retries = options.retries ?? 3;
    this.#fetch = options.fetch ?? fetch;
  }

  /** A client from `TICKLER_URL` and `TICKLER_TOKEN`. */
  static fromEnv(env: Record<string, string | undefined> = process.env): TicklerClient {
    const url = env.TICKLER_URL;
    if (!url) throw new Error("TICKLER_URL is not set");
    return new TicklerClient({ url, token: env.TICKLER_TOKEN });
  }

  async call<Op extends OperationId>(
    op: Op,
    args: Args<Op>,
    options: CallOptions = {},
  ): Promise<Answer<Op>> {
    const { method, path } = OPERATIONS[op];
    const given = args as { path?: Record<string, unknown>; query?: Record<string, unknown>; body?: unknown };
    const url = this.url + pathFilled(path, given.path ?? {}) + queryString(given.query ?? {});
    const headers: Record<string, string> = { accept: "application/json", ...options.headers };
    if (this.#token) headers.authorization = `Bearer ${this.#token}`;
    let body: string | undefined;
    if (given.body !== undefined) {
      headers["content-type"] = "application/json";
      body = JSON.stringify(given.body);
    }
    for (let tries = 0; ; tries++) {
      const response = await this.#fetch(url, { method, headers, body, signal: options.signal });
      const text = await response.text();
      let value: unknown = undefined;
      try {
        value = text ? JSON.parse(text) : undefined;
      } catch {
        value = undefined;
      }
      if (response.ok) return value as Answer<Op>;
      const error = (value as { error?: { code?: unknown; message?: unknown } } | undefined)?.error;
      const code = typeof error?.code === "string" ? error.code : "";
      // 429 and 503 write nothing: tried again after Retry-After. A quota
      // passed is not a matter of seconds: said at once.
      const again = (response.status === 429 || response.status === 503) && code !== "quota_exceeded";
      const wait = retryAfterMs(response.headers.get("retry-after"));
      if (again && tries < this.#retries && wait <= RETRY_AFTER_MAX_MS) {
        await sleep(wait, options.signal);
        continue;
      }
      const message = typeof error?.message === "string" ? error.message : text.slice(0, 200);
      throw new TicklerError(response.status, code, message, value);
    }
  }
}

/** `template` with each `{name}` replaced by its value, escaped. */
export function pathFilled(template: string, values: Record<string, unknown>): string {
  return template.replace(/\{([^}]+)\}/g, (_, name: string) => {
    const value = values[name];
    if (value === undefined || value === null) {
      throw new Error(`path parameter ${name} is missing`);
    }
    return encodeURIComponent(String(value));
  });
}

/** `?a=1&b=x` of the defined values of `query` (arrays repeated). */
export function queryString(query: Record<string, unknown>): string {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(query)) {
    if (value === undefined || value === null) continue;
    for (const item of Array.isArray(value) ? value : [value]) params.append(name, String(item));
  }
  const text = params.toString();
  return text ? `?${text}` : "";
}

/** A `Retry-After` in milliseconds: seconds, or an HTTP date; 1 s without one. */
export function retryAfterMs(header: string | null, now: number = Date.now()): number {
  if (header === null || header.trim() === "") return 1_000;
  const seconds = Number(header.trim());
  if (Number.isFinite(seconds)) return Math.max(0, seconds * 1_000);
  const at = Date.parse(header);
  return Number.isNaN(at) ? 1_000 : Math.max(0, at - now);
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
