/**
 * GraphQL error mapping: an `AppError` becomes a GraphQL error whose extensions carry the same
 * `code`, `status_code` and `extra` as the REST envelope; GraphQL errors that carry a 4xx
 * `status_code`, and GraphQL's own request errors (400), keep their code; anything else is an
 * opaque internal error.
 */
import type { GraphQLFormattedError } from "graphql";
import { unwrapResolverError } from "@apollo/server/errors";
import { AppError } from "../services/errors.js";

/**
 * Apollo `formatError`: `AppError` → message = detail, extensions `{code, status_code, extra}`; 4xx
 * GraphQL errors keep their code and status; anything else becomes `{code: "INTERNAL", status_code: 500}`
 * without internals.
 */
export function formatGraphqlError(formatted: GraphQLFormattedError, error: unknown): GraphQLFormattedError {
  const original = unwrapResolverError(error);
  if (original instanceof AppError) {
    return {
      ...formatted,
      message: original.detail,
      extensions: { code: original.code.toUpperCase(), status_code: original.status, extra: original.extra ?? null },
    };
  }
  const code = formatted.extensions?.code;
  const statusCode = formatted.extensions?.status_code;
  if (typeof statusCode === "number" && statusCode >= 400 && statusCode < 500) {
    return { ...formatted, extensions: { code, status_code: statusCode, extra: formatted.extensions?.extra ?? null } };
  }
  if (code === "GRAPHQL_VALIDATION_FAILED" || code === "BAD_USER_INPUT" || code === "GRAPHQL_PARSE_FAILED") {
    return { ...formatted, extensions: { ...formatted.extensions, status_code: 400 } };
  }
  return {
    message: "Internal error",
    locations: formatted.locations,
    path: formatted.path,
    extensions: { code: "INTERNAL", status_code: 500 },
  };
}
