/**
 * What an error may say in a log line (issue 5, item 4 "Nothing sensitive in logs"). Database
 * errors carry the statement's parameters (emails, key prefixes, key hashes, whole request
 * bodies), the SQL text, the driver's `detail` (`Key (email)=(…) already exists`) and quoted
 * values in their message; body-parser errors carry the raw body. The `err` serializer installed
 * by `withSafeErrors` keeps an allowlist instead: the error's class, message (quoted values
 * blanked for database errors), stack, codes, the identifiers PostgreSQL names (table, column,
 * constraint, routine) and a short statement name such as `INSERT INTO users`; causes and
 * aggregated errors are cleaned the same way. Every logger the server uses goes through it.
 */
import type { Logger } from "pino";
import { traceLogFields } from "./shared/tracing.js";

/** Plain fields copied when they hold a string, number or boolean: codes and identifiers, never values. */
const KEPT_FIELDS = [
  "code",
  "errno",
  "syscall",
  "status",
  "statusCode",
  "severity",
  "routine",
  "schema",
  "table",
  "column",
  "constraint",
  "dataType",
] as const;

/** How deep `cause` chains and aggregated errors are followed. */
const MAX_NESTING = 4;
/** Aggregated errors kept per level. */
const MAX_AGGREGATED = 10;

/** A serialized error: only the allowlisted fields. */
export interface SafeError {
  type: string;
  message: string;
  stack?: string;
  statement?: string;
  cause?: SafeError | string;
  errors?: Array<SafeError | string>;
  [field: string]: unknown;
}

type ErrorLike = Record<string, unknown> & { message?: unknown; stack?: unknown };

/** True for errors raised by PostgreSQL or TypeORM's query layer (they may echo values). */
function isDatabaseError(err: ErrorLike): boolean {
  return (
    "query" in err ||
    "parameters" in err ||
    "driverError" in err ||
    (typeof err.severity === "string" && typeof err.code === "string" && /^[0-9A-Z]{5}$/.test(err.code))
  );
}

/** `invalid input syntax for type uuid: "x"` → `… uuid: "…"`; `Key (email)=(x)` → `Key (email)=(…)`. */
function blankValues(text: string): string {
  return text.replace(/"(?:[^"\\]|\\.)*"/g, '"…"').replace(/=\([^)]*\)/g, "=(…)");
}

/**
 * A statement's short name from its SQL text: the table it writes (`INSERT INTO users`,
 * `UPDATE api_keys`, `WITH … INSERT INTO activity`) or reads (`SELECT … FROM users`). Only the
 * leading keyword and identifiers are kept, never literals.
 */
export function statementName(sql: string): string {
  const verb = (/^\s*([A-Za-z]+)/.exec(sql)?.[1] ?? "SQL").toUpperCase();
  const write = /\b(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+([A-Za-z_][\w.]*)/i.exec(sql);
  if (write) {
    const target = `${write[1].toUpperCase().replace(/\s+/, " ")} ${write[2]}`;
    return write[1].toUpperCase().startsWith(verb) ? target : `${verb} … ${target}`;
  }
  const read = /\bFROM\s+([A-Za-z_][\w.]*)/i.exec(sql);
  return read ? `${verb} … FROM ${read[1]}` : verb;
}

function safe(value: unknown, depth: number): SafeError | string {
  if (value === null || typeof value !== "object") return String(value);
  const err = value as ErrorLike;
  const db = isDatabaseError(err);
  const message = typeof err.message === "string" ? err.message : "";
  const out: SafeError = {
    type: (err.constructor as { name?: string } | undefined)?.name ?? "Object",
    message: db ? blankValues(message) : message,
  };
  if (typeof err.stack === "string") {
    // The stack's first lines repeat the message; the frames below name code, not data.
    out.stack = db && message ? err.stack.split(message).join(out.message) : err.stack;
  }
  for (const field of KEPT_FIELDS) {
    const v = err[field];
    if (typeof v === "string" || typeof v === "number" || typeof v === "boolean") out[field] = v;
  }
  if (typeof err.query === "string") out.statement = statementName(err.query);
  if (depth < MAX_NESTING) {
    if (err.cause !== undefined) out.cause = safe(err.cause, depth + 1);
    if (Array.isArray(err.errors)) out.errors = err.errors.slice(0, MAX_AGGREGATED).map((e) => safe(e, depth + 1));
  }
  return out;
}

/** pino's `err` serializer: the allowlisted view of an error (see the module header). */
export function safeErrorSerializer(err: unknown): SafeError | string {
  return safe(err, 0);
}

/**
 * Adds the current span's `trace_id` and `span_id` to a log line written inside a traced piece of
 * work (issue 29, item 2: the trace id in every log line); the line as is otherwise.
 */
function withTraceIds(object: object): object {
  const ids = traceLogFields();
  return ids ? { ...ids, ...object } : object;
}

/**
 * A child of `logger` whose `err` field always goes through `safeErrorSerializer`, and whose
 * lines carry the trace id of the span they are written in (`withTraceIds`).
 */
export function withSafeErrors(logger: Logger): Logger {
  return logger.child({}, { serializers: { err: safeErrorSerializer }, formatters: { log: withTraceIds } });
}
