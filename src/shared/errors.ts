/**
 * Domain errors. Services throw `AppError` with a code from `ErrorCode`; each transport maps the
 * code once (REST: `rest/error-envelope.ts` with the clients' dialects of `error-dialects.ts`,
 * GraphQL: `schema/error-formatter.ts`).
 * Envelope and statuses: spec "Errors" and DESIGN §3 Errors.
 */
import { z, type ZodError } from "zod";

export enum ErrorCode {
  InvalidRequest = "invalid_request",
  Unauthenticated = "unauthenticated",
  InsufficientCredit = "insufficient_credit",
  Forbidden = "forbidden",
  NotFound = "not_found",
  Conflict = "conflict",
  PayloadTooLarge = "payload_too_large",
  RateLimited = "rate_limited",
  /** The client went away before the answer (nginx's 499); nobody reads the status. */
  ClientClosed = "client_closed",
  EngineFailure = "engine_failure",
  EngineUnavailable = "engine_unavailable",
  EngineTimeout = "engine_timeout",
  Internal = "internal",
  /** An identity provider (OpenID Connect) could not be reached or answered with a server error. */
  ProviderFailure = "provider_failure",
  /**
   * PostgreSQL cannot be reached or does not answer in time (issue 28, item 1): 503 with
   * `Retry-After`, never 500 (`shared/database-errors.ts`).
   */
  DatabaseUnavailable = "database_unavailable",
}

/** HTTP status for each error code (exhaustive). */
export function statusForCode(code: ErrorCode): number {
  switch (code) {
    case ErrorCode.InvalidRequest:
      return 400;
    case ErrorCode.Unauthenticated:
      return 401;
    case ErrorCode.InsufficientCredit:
      return 402;
    case ErrorCode.Forbidden:
      return 403;
    case ErrorCode.NotFound:
      return 404;
    case ErrorCode.Conflict:
      return 409;
    case ErrorCode.PayloadTooLarge:
      return 413;
    case ErrorCode.RateLimited:
      return 429;
    case ErrorCode.ClientClosed:
      return 499;
    case ErrorCode.EngineFailure:
      return 502;
    case ErrorCode.EngineUnavailable:
      return 503;
    case ErrorCode.EngineTimeout:
      return 504;
    case ErrorCode.Internal:
      return 500;
    case ErrorCode.ProviderFailure:
      return 502;
    case ErrorCode.DatabaseUnavailable:
      return 503;
    default:
      return assertUnreachable(code);
  }
}

/** Exhaustiveness guard for `switch` over closed unions. @throws Error always. */
export function assertUnreachable(value: never): never {
  throw new Error(`unreachable: ${String(value)}`);
}

/** One offending input field, as listed in the 400 envelope's `extra`. */
export interface FieldIssue {
  field: string;
  message: string;
}

/** Most characters of one client value an error repeats (issue 28, item 4). */
export const MAX_ECHO_CHARS = 200;

/**
 * Most characters of an error's `detail`, and of each string in its `extra`: the bound on what any
 * error can reflect, for a client value a message repeats without `echo` (issue 28, item 4).
 */
export const MAX_DETAIL_CHARS = 1_000;

/**
 * `text` cut to at most `max` characters plus a marker naming how many were left out (`…(+N
 * characters)`), never between the two halves of a surrogate pair; shorter text is returned as
 * it is. O(max).
 */
export function clipText(text: string, max: number): string {
  if (text.length <= max) return text;
  let end = max;
  const last = text.charCodeAt(end - 1);
  if (last >= 0xd800 && last <= 0xdbff) end--;
  return `${text.slice(0, end)}…(+${text.length - end} characters)`;
}

/**
 * A client value as an error message repeats it (a model id, a path, a tool name): at most
 * `MAX_ECHO_CHARS` characters, so a 1 MB value is never reflected whole (issue 28, item 4:
 * reflection and amplification). Non-strings are written with `String`.
 */
export function echo(value: unknown): string {
  return clipText(String(value), MAX_ECHO_CHARS);
}

/** `extra` with every string in it (3 levels deep) cut to `MAX_DETAIL_CHARS`; others as they are. */
function clipExtra(value: unknown, depth = 0): unknown {
  if (typeof value === "string") return clipText(value, MAX_DETAIL_CHARS);
  if (depth >= 3 || value === null || typeof value !== "object") return value;
  if (Array.isArray(value)) return value.map((v) => clipExtra(v, depth + 1));
  if (Object.getPrototypeOf(value) !== Object.prototype) return value;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) out[k] = clipExtra(v, depth + 1);
  return out;
}

/**
 * An expected failure with a code, a short human `detail`, and optional structured `extra`.
 * `detail` and the strings of `extra` are cut to `MAX_DETAIL_CHARS` (issue 28, item 4), the bound
 * on what an error reflects; messages cut the client values they repeat shorter, with `echo`.
 */
export class AppError extends Error {
  override name = "AppError";
  /**
   * A finer stable machine code than `code`, where one is known (`invalid_api_key`): the OpenAI
   * dialect's `error.code` (`shared/error-dialects.ts`, issue 27, item 1). Set with `because`.
   */
  reason?: string;
  readonly detail: string;
  readonly extra?: unknown;
  constructor(
    readonly code: ErrorCode,
    detail: string,
    extra?: unknown,
    /** Seconds for a `Retry-After` header (429/503). */
    readonly retryAfterS?: number,
  ) {
    const clipped = clipText(detail, MAX_DETAIL_CHARS);
    super(clipped);
    this.detail = clipped;
    this.extra = clipExtra(extra);
  }

  get status(): number {
    return statusForCode(this.code);
  }

  /** Sets `reason` (a snake_case machine code). @returns this error, for `throw x.because(…)`. */
  because(reason: string): this {
    this.reason = reason;
    return this;
  }

  static invalid(detail: string, issues?: FieldIssue[]): AppError {
    return new AppError(ErrorCode.InvalidRequest, detail, issues);
  }
  static unauthenticated(detail = "Not authenticated"): AppError {
    return new AppError(ErrorCode.Unauthenticated, detail);
  }
  static forbidden(detail = "Not allowed"): AppError {
    return new AppError(ErrorCode.Forbidden, detail);
  }
  static notFound(detail = "Not found"): AppError {
    return new AppError(ErrorCode.NotFound, detail);
  }
  static conflict(detail: string): AppError {
    return new AppError(ErrorCode.Conflict, detail);
  }
}

type Issue = ZodError["issues"][number];

/**
 * A failed union names what went wrong inside the one option the value has the shape of (an
 * array given where "string or array of items" is asked names `input[0].content`, not `input`);
 * when no single option fits the value's shape, the union itself is named.
 */
function unionBranchIssues(issue: Issue): Issue[] {
  if (issue.code !== "invalid_union" || !Array.isArray(issue.errors)) return [issue];
  const shaped = issue.errors.filter((branch) => !branch.some((i) => i.code === "invalid_type" && i.path.length === 0));
  if (shaped.length !== 1) return [issue];
  return shaped[0].flatMap((inner) => unionBranchIssues({ ...inner, path: [...issue.path, ...inner.path] }));
}

/** Converts zod issues to the envelope's field list (`messages[0].role`, …). */
export function zodIssues(error: ZodError, prefix = ""): FieldIssue[] {
  // A path can hold a client's key (a record's, or an unknown one a message names): cut both.
  return error.issues.flatMap(unionBranchIssues).map((issue) => ({
    field: echo(prefix + formatPath(issue.path)),
    message: echo(issue.message),
  }));
}

function formatPath(path: readonly PropertyKey[]): string {
  let out = "";
  for (const part of path) {
    if (typeof part === "number") out += `[${part}]`;
    else out += out ? `.${String(part)}` : String(part);
  }
  return out || "body";
}

/** Most fields a 400 lists in `extra`. */
const MAX_REPORTED_ISSUES = 50;

/**
 * Validates `input` against a zod schema.
 * @returns the parsed value (unknown fields stripped, defaults applied).
 * @throws AppError 400 "Invalid request" whose `extra` lists every offending field.
 */
export function parseInput<T>(
  schema: { safeParse(v: unknown): { success: true; data: T } | { success: false; error: ZodError } },
  input: unknown,
): T {
  const result = schema.safeParse(input);
  if (result.success) return result.data;
  // A body with thousands of bad elements is named by its first few: building and sending every
  // issue took seconds on the main thread (issue 5, item 1).
  const all = result.error.issues.length > MAX_REPORTED_ISSUES * 4 ? undefined : zodIssues(result.error);
  const issues = (all ?? zodIssues(new z.ZodError(result.error.issues.slice(0, MAX_REPORTED_ISSUES)))).slice(
    0,
    MAX_REPORTED_ISSUES,
  );
  const more = result.error.issues.length > issues.length ? ` (and more)` : "";
  // The list is cut short of the detail's bound, so "(and more)" is never cut off.
  const fields = clipText([...new Set(issues.map((i) => i.field))].join(", "), MAX_DETAIL_CHARS - 100);
  throw AppError.invalid(`Invalid request: ${fields}${more}`, issues);
}

/**
 * Validates a uuid path parameter (spec: "Path parameters named `*_id` are strings in uuid format").
 * @throws AppError 400 whose `extra` names the parameter.
 */
export function parseUuidParam(name: string, value: unknown): string {
  return parseInput(z.object({ [name]: z.uuid() }), { [name]: value })[name] as string;
}
