// The types that tie an operation's arguments and answer to the API's
// OpenAPI document (src/schema.ts, generated).

import type { operations } from "./schema.js";
import type { OperationId } from "./operations.js";

type Operation<Op extends OperationId> = operations[Op];
type Parameters<Op extends OperationId> = Operation<Op>["parameters"];

type PathOf<Op extends OperationId> =
  Parameters<Op> extends { path: infer P } ? P : never;
type QueryOf<Op extends OperationId> =
  Parameters<Op> extends { query?: infer Q } ? Q : never;
type RequiredBody<Op extends OperationId> =
  Operation<Op> extends { requestBody: { content: { "application/json": infer B } } }
    ? B
    : never;
type OptionalBody<Op extends OperationId> =
  Operation<Op> extends { requestBody?: { content: { "application/json": infer B } } }
    ? B
    : never;

type IsNever<T> = [T] extends [never] ? true : false;

/**
 * What operation `Op` takes: `path` (its path parameters, when it has any),
 * `query` (its query parameters, when it has any) and `body` (its JSON body,
 * when it takes one), each typed from the API's document.
 */
export type Args<Op extends OperationId> = (IsNever<PathOf<Op>> extends true
  ? { path?: never }
  : { path: PathOf<Op> }) &
  (IsNever<Exclude<QueryOf<Op>, undefined>> extends true
    ? { query?: never }
    : { query?: Exclude<QueryOf<Op>, undefined> }) &
  (IsNever<RequiredBody<Op>> extends true
    ? IsNever<OptionalBody<Op>> extends true
      ? { body?: never }
      : { body?: OptionalBody<Op> }
    : { body: RequiredBody<Op> });

type Responses<Op extends OperationId> = Operation<Op>["responses"];
type Success = 200 | 201 | 202 | 204;

/** What operation `Op` answers when it succeeds (any of its 2xx answers). */
export type Answer<Op extends OperationId> = {
  [S in keyof Responses<Op>]: S extends Success
    ? Responses<Op>[S] extends { content: { "application/json": infer T } }
      ? T
      : undefined
    : never;
}[keyof Responses<Op>];

/** Per-call options. */
export interface CallOptions {
  /** Cancels the call, a wait before a retry included. */
  signal?: AbortSignal;
  /** Extra request headers (`Idempotency-Key`, …). */
  headers?: Record<string, string>;
}
