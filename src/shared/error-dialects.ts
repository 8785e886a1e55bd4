/**
 * Errors in the dialects the official clients parse (issue 27, item 1). One failure (`Failure`:
 * an `ErrorCode`, the status, the spec's `detail` and `extra`, and an optional finer `reason`) is
 * written as the spec's envelope `{status_code, detail, extra?}` plus, beside it, the object the
 * caller's client reads:
 * - OpenAI (`openai` v6 reads `error.message`, and `code`, `param`, `type`):
 *   `error: {message, type, code, param}`;
 * - Anthropic (`@anthropic-ai/sdk` reads `error.type` and `error.message`):
 *   `type: "error"`, `error: {type, message}`.
 * `errorBody` is the one builder: REST's error middleware and every stream's closing error event
 * call it. Which paths speak which dialect is REST's rule (`rest/error-envelope.ts`).
 */
import { type AppError, ErrorCode, assertUnreachable } from "./errors.js";

/** The error dialect a caller's client parses. */
export type ErrorDialect = "openai" | "anthropic";

/** A failure as every transport renders it. */
export interface Failure {
  /** The HTTP status (`statusForCode(code)` for an `AppError`; body-parser and Node refusals keep theirs). */
  status: number;
  code: ErrorCode;
  /** The spec's `detail`: one human sentence. */
  detail: string;
  /** The spec's `extra`: field issues (`[{field, message}]`) or an object; absent when none. */
  extra?: unknown;
  /** A finer machine code than `code` (`invalid_api_key`, `invalid_json`); see `AppError.reason`. */
  reason?: string;
}

/** OpenAI's error object (`{"error": {...}}` in its API and in its streams). */
export interface OpenAiError {
  message: string;
  type: string;
  code: string | null;
  param: string | null;
}

/** Anthropic's error object (`{"type": "error", "error": {...}}`, also the `error` stream event). */
export interface AnthropicError {
  type: string;
  message: string;
}

/** The spec's envelope with the dialect's fields beside it: what every REST error answers. */
export interface ErrorEnvelope {
  status_code: number;
  detail: string;
  extra?: unknown;
  /** Anthropic dialect only: always `"error"`. */
  type?: "error";
  error: OpenAiError | AnthropicError;
}

/** The failure an `AppError` describes (its status, detail, extra and reason). */
export function appFailure(err: AppError): Failure {
  const failure: Failure = { status: err.status, code: err.code, detail: err.detail };
  if (err.extra !== undefined) failure.extra = err.extra;
  if (err.reason !== undefined) failure.reason = err.reason;
  return failure;
}

/**
 * OpenAI's `type` for each code (exhaustive). OpenAI uses `invalid_request_error` for every
 * refused request, so 404, 409 and 413 are that too; 402 is `insufficient_quota`, the type (and
 * code) OpenAI sends when an account has no credit left (with a 429 there; the spec's 402 stays,
 * and the `openai` client throws its plain `APIError` for it), so code written against OpenAI
 * recognises it.
 */
export function openAiErrorType(code: ErrorCode): string {
  switch (code) {
    case ErrorCode.InvalidRequest:
    case ErrorCode.NotFound:
    case ErrorCode.Conflict:
    case ErrorCode.PayloadTooLarge:
    case ErrorCode.ClientClosed:
      return "invalid_request_error";
    case ErrorCode.Unauthenticated:
      return "authentication_error";
    case ErrorCode.InsufficientCredit:
      return "insufficient_quota";
    case ErrorCode.Forbidden:
      return "permission_error";
    case ErrorCode.RateLimited:
      return "rate_limit_error";
    case ErrorCode.EngineFailure:
    case ErrorCode.EngineUnavailable:
    case ErrorCode.EngineTimeout:
    case ErrorCode.Internal:
    case ErrorCode.ProviderFailure:
    case ErrorCode.DatabaseUnavailable:
      return "server_error";
    default:
      return assertUnreachable(code);
  }
}

/**
 * Anthropic's `type` for each code (exhaustive), as its API documents them and its SDK's
 * `ErrorType` lists them: `billing_error` (402), `conflict_error` (409), `request_too_large`
 * (413), `overloaded_error` for a busy or not-ready engine or an unavailable database (503),
 * `timeout_error` (504).
 */
export function anthropicErrorType(code: ErrorCode): string {
  switch (code) {
    case ErrorCode.InvalidRequest:
    case ErrorCode.ClientClosed:
      return "invalid_request_error";
    case ErrorCode.Unauthenticated:
      return "authentication_error";
    case ErrorCode.InsufficientCredit:
      return "billing_error";
    case ErrorCode.Forbidden:
      return "permission_error";
    case ErrorCode.NotFound:
      return "not_found_error";
    case ErrorCode.Conflict:
      return "conflict_error";
    case ErrorCode.PayloadTooLarge:
      return "request_too_large";
    case ErrorCode.RateLimited:
      return "rate_limit_error";
    case ErrorCode.EngineUnavailable:
    case ErrorCode.DatabaseUnavailable:
      return "overloaded_error";
    case ErrorCode.EngineTimeout:
      return "timeout_error";
    case ErrorCode.EngineFailure:
    case ErrorCode.Internal:
    case ErrorCode.ProviderFailure:
      return "api_error";
    default:
      return assertUnreachable(code);
  }
}

/** Codes OpenAI's own API uses for the same conditions, where ours differ. */
const OPENAI_CODES: Partial<Record<ErrorCode, string>> = {
  [ErrorCode.InsufficientCredit]: "insufficient_quota",
  [ErrorCode.RateLimited]: "rate_limit_exceeded",
};

/** A field issue's message that is itself a machine code (the engines' prompt-too-long refusal). */
const ISSUE_CODES = new Set(["context_length_exceeded"]);

function issues(extra: unknown): Array<{ field?: unknown; message?: unknown; code?: unknown }> {
  if (Array.isArray(extra)) return extra.filter((i): i is object => typeof i === "object" && i !== null);
  return typeof extra === "object" && extra !== null ? [extra] : [];
}

/**
 * The stable machine code of a failure: its `reason`; else `extra.code` (`model_not_found`,
 * `model_not_downloaded`, `item_too_large` …); else a field issue that names one
 * (`context_length_exceeded`); else OpenAI's code for the condition (`insufficient_quota`,
 * `rate_limit_exceeded`); else the `ErrorCode` (`invalid_request`, `not_found`, …).
 */
export function failureCode(failure: Failure): string {
  if (failure.reason) return failure.reason;
  const found = issues(failure.extra);
  const named = found.find((i) => typeof i.code === "string")?.code as string | undefined;
  if (named) return named;
  const issueCode = found.find((i) => typeof i.message === "string" && ISSUE_CODES.has(i.message))?.message;
  if (issueCode) return issueCode as string;
  return OPENAI_CODES[failure.code] ?? failure.code;
}

/** The request field a failure is about: the first field issue's `field` (or `extra.field`), else null. */
export function failureParam(failure: Failure): string | null {
  const field = issues(failure.extra).find((i) => typeof i.field === "string")?.field;
  return (field as string | undefined) ?? null;
}

/** OpenAI's error object for `failure`: `message` is the envelope's `detail`. */
export function openAiError(failure: Failure): OpenAiError {
  return {
    message: failure.detail,
    type: openAiErrorType(failure.code),
    code: failureCode(failure),
    param: failureParam(failure),
  };
}

/** Anthropic's error object for `failure`: `message` is the envelope's `detail`. */
export function anthropicError(failure: Failure): AnthropicError {
  return { type: anthropicErrorType(failure.code), message: failure.detail };
}

/**
 * The one error body (issue 27, item 1): the spec's envelope `{status_code, detail, extra?}`
 * unchanged, plus `dialect`'s fields — OpenAI's `error: {message, type, code, param}`, or
 * Anthropic's `type: "error"` and `error: {type, message}`.
 */
export function errorBody(failure: Failure, dialect: ErrorDialect): ErrorEnvelope {
  const envelope = {
    status_code: failure.status,
    detail: failure.detail,
    ...(failure.extra !== undefined ? { extra: failure.extra } : {}),
  };
  switch (dialect) {
    case "openai":
      return { ...envelope, error: openAiError(failure) };
    case "anthropic":
      return { ...envelope, type: "error", error: anthropicError(failure) };
    default:
      return assertUnreachable(dialect);
  }
}
