/**
 * One value per query parameter (issue 28, item 4): a parameter a route documents (its
 * `doc.query`) is given at most once, as one plain value. Express's `simple` query parser
 * (node:querystring) turns `?limit=1&limit=2` into an array and keeps `limit[]` and `limit[a]` as
 * keys of their own, which the services' schemas would never see (so `?limit[]=1` went through as
 * if no limit were given); each of these is a 400 naming the parameter here, before the route
 * runs. Parameters a route does not document are ignored, as before: the official clients send
 * arrays as `name[]=` (`arrayFormat: brackets`) for parameters this service does not take.
 * An empty value is the schemas' to refuse (`optionalQuery`). A documented parameter's value must
 * also be valid UTF-8 once percent-decoded: node:querystring puts U+FFFD in place of bytes that are
 * not (`?model=%FF` filtered on "\uFFFD" and answered 200), where bodies answer 400 (issue 28,
 * item 4; review).
 */
import type { RequestHandler } from "express";
import { AppError, type FieldIssue, echo } from "../shared/errors.js";

/** What a parameter given twice, or as an array or object, is told. */
export const SINGLE_VALUE_MESSAGE = "must be given once, as one plain value (not repeated, not name[] or name[key])";

/**
 * The query issues of `query` (as the `simple` parser gives it) for the documented parameter
 * `names`: one per parameter given more than once or in bracket form, in the order met.
 */
export function multiValueIssues(query: Record<string, unknown>, names: ReadonlySet<string>): FieldIssue[] {
  const named = new Set<string>();
  for (const [key, value] of Object.entries(query)) {
    const bracket = key.indexOf("[");
    const name = bracket > 0 ? key.slice(0, bracket) : key;
    if (!names.has(name)) continue;
    if (bracket > 0 || typeof value !== "string") named.add(name);
  }
  return [...named].map((name) => ({ field: echo(name), message: SINGLE_VALUE_MESSAGE }));
}

/** What a parameter whose percent-encoded bytes are not UTF-8 is told. */
export const ENCODING_MESSAGE = "must be valid UTF-8 once percent-decoded";

/** True when `raw` (a query string's key or value, `+` for space) percent-decodes to valid UTF-8. */
function decodes(raw: string): boolean {
  try {
    decodeURIComponent(raw.replace(/\+/g, " "));
    return true;
  } catch {
    return false;
  }
}

/**
 * The query issues of the raw query string `search` (after `?`, undecoded) for the documented
 * parameter `names`: one per parameter whose value is not valid UTF-8 once percent-decoded.
 */
export function encodingIssues(search: string, names: ReadonlySet<string>): FieldIssue[] {
  const named = new Set<string>();
  for (const pair of search.split("&")) {
    const eq = pair.indexOf("=");
    if (eq < 0 || decodes(pair.slice(eq + 1))) continue;
    const rawKey = pair.slice(0, eq);
    const key = decodes(rawKey) ? decodeURIComponent(rawKey.replace(/\+/g, " ")) : rawKey;
    const bracket = key.indexOf("[");
    const name = bracket > 0 ? key.slice(0, bracket) : key;
    if (names.has(name)) named.add(name);
  }
  return [...named].map((name) => ({ field: echo(name), message: ENCODING_MESSAGE }));
}

/**
 * Middleware for a route whose documented query parameters are `names`: 400 (the envelope, each
 * offending parameter named in `extra`) when one is repeated, sent as an array or object, or not
 * valid UTF-8 once percent-decoded.
 */
export function singleQueryValues(names: readonly string[]): RequestHandler {
  const known = new Set(names);
  return (req, _res, next) => {
    const q = req.originalUrl.indexOf("?");
    const issues = [
      ...multiValueIssues(req.query as Record<string, unknown>, known),
      ...(q < 0 ? [] : encodingIssues(req.originalUrl.slice(q + 1).split("#")[0], known)),
    ];
    if (issues.length === 0) return next();
    next(AppError.invalid(`Invalid request: ${issues.map((i) => i.field).join(", ")}`, issues));
  };
}
