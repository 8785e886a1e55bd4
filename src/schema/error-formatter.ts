/**
 * GraphQL error mapping: an `AppError` becomes a GraphQL error whose extensions carry the same
 * `code`, `status_code` and `extra` as the REST envelope; a request error (Apollo's own
 * `BAD_REQUEST` refusals — empty or batched bodies, CSRF —, parse and validation failures, the
 * limits of `graphql-limits.ts`, bad variables) keeps its real message and code with its 4xx
 * `status_code` (issue 5, item 1); anything else is an opaque internal error. The output carries
 * exactly `message`, `locations`, `path` and `extensions {code, status_code, extra}` — never a
 * stack trace, and never a message over `MAX_DETAIL_CHARS` (issue 28, item 4).
 */
import type { GraphQLFormattedError } from "graphql";
import { GraphQLError } from "graphql";
import { unwrapResolverError } from "@apollo/server/errors";
import { asDatabaseUnavailable } from "../shared/database-errors.js";
import { AppError, MAX_DETAIL_CHARS, clipText } from "../shared/errors.js";

/** Codes of errors in the request itself, answered 400 when they carry no HTTP status of their own. */
const REQUEST_ERROR_CODES = new Set([
  "BAD_REQUEST",
  "BAD_USER_INPUT",
  "GRAPHQL_PARSE_FAILED",
  "GRAPHQL_VALIDATION_FAILED",
  "OPERATION_RESOLUTION_FAILURE",
  "PERSISTED_QUERY_NOT_FOUND",
  "PERSISTED_QUERY_NOT_SUPPORTED",
]);

/** The 4xx status an error asks for: `extensions.status_code`, else Apollo's `extensions.http.status`. */
function clientStatus(formatted: GraphQLFormattedError, original: unknown): number | undefined {
  const fromExtensions = formatted.extensions?.status_code;
  const http = original instanceof GraphQLError ? original.extensions.http : undefined;
  const fromHttp = typeof http === "object" && http !== null ? (http as { status?: unknown }).status : undefined;
  for (const status of [fromExtensions, fromHttp]) {
    if (typeof status === "number" && status >= 400 && status < 500) return status;
  }
  return undefined;
}

/**
 * The `AppError` behind `error`, if any: a resolver's own (Apollo's `unwrapResolverError`), or one
 * that graphql-ws wrapped in a `GraphQLError` without a path (a subscription's event stream that
 * failed after it started: the error its iterator threw is the `originalError`). A database
 * stopped, frozen or past a timeout is the database's 503, never INTERNAL (issue 28, item 1;
 * a subscription whose feed could not be read answered "Internal error").
 */
function appErrorOf(error: unknown): AppError | undefined {
  let e = unwrapResolverError(error);
  for (let depth = 0; depth < 4; depth++) {
    if (e instanceof AppError) return e;
    const unavailable = asDatabaseUnavailable(e);
    if (unavailable) return unavailable;
    if (!(e instanceof GraphQLError) || e.originalError === undefined) return undefined;
    e = e.originalError;
  }
  return undefined;
}

/**
 * Apollo `formatError` (and graphql-ws `onNext`/`onError`): `AppError` (and an unavailable
 * database, as its 503 `AppError`) → message = detail,
 * extensions `{code, status_code, extra}`; request errors keep message and code with their 4xx
 * status (400 by default); anything else becomes `{code: "INTERNAL", status_code: 500}` without
 * internals.
 */
export function formatGraphqlError(formatted: GraphQLFormattedError, error: unknown): GraphQLFormattedError {
  const original = appErrorOf(error);
  if (original instanceof AppError) {
    return {
      ...formatted,
      message: original.detail,
      extensions: { code: original.code.toUpperCase(), status_code: original.status, extra: original.extra ?? null },
    };
  }
  const rawCode = formatted.extensions?.code;
  const code = typeof rawCode === "string" ? rawCode : undefined;
  const status = clientStatus(formatted, error) ?? (code && REQUEST_ERROR_CODES.has(code) ? 400 : undefined);
  if (status !== undefined) {
    return {
      // graphql-js repeats a refused variable's value in full: cut as the envelope's detail is.
      message: clipText(formatted.message, MAX_DETAIL_CHARS),
      locations: formatted.locations,
      path: formatted.path,
      // A client error never says "internal" (Apollo labels some of its own 400s so).
      extensions: {
        code: !code || code === "INTERNAL_SERVER_ERROR" ? "BAD_REQUEST" : code,
        status_code: status,
        extra: formatted.extensions?.extra ?? null,
      },
    };
  }
  return {
    message: "Internal error",
    locations: formatted.locations,
    path: formatted.path,
    extensions: { code: "INTERNAL", status_code: 500 },
  };
}
