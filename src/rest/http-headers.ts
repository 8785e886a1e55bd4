/**
 * Headers every answer carries and CORS (issue 5, item 6).
 *
 * - `Cache-Control: no-store` on every answer: signup, login and key creation carry tokens and
 *   keys, and every other answer is per-caller and live, so nothing here is meant for a cache.
 *   Handlers may say otherwise (SSE streams send `no-cache`; they carry no credential).
 * - `X-Content-Type-Options: nosniff` on every answer.
 * - CORS is answered deliberately: origins come from configuration (`corsOrigins`, off by
 *   default). An allowed origin gets `Access-Control-Allow-Origin` (its own value) on every
 *   answer and its preflights get 204 with the allowed methods and the headers it asked for.
 *   No `Access-Control-Allow-Credentials`: the API takes credentials in headers, never cookies.
 *   Every other `OPTIONS` (CORS off, an origin not allowed, or no preflight at all) gets 204
 *   without CORS headers: the browser then refuses the cross-origin call, and a plain `OPTIONS`
 *   probe gets an honest "nothing to negotiate" instead of the 404 envelope of an unknown route.
 */
import type { RequestHandler } from "express";

/** Methods the API serves, announced to allowed preflights. */
const ALLOWED_METHODS = "GET, POST, PUT, PATCH, DELETE, OPTIONS";
/** Answer headers a browser script may read. */
const EXPOSED_HEADERS = "x-request-id, x-trace-id, x-switchyard-overhead-ms, retry-after";
/** Asked-for request headers are echoed when they form a plain header-name list. */
const HEADER_LIST = /^[A-Za-z0-9!#$%&'*+.^_`|~-]+(\s*,\s*[A-Za-z0-9!#$%&'*+.^_`|~-]+)*$/;
/** How long a browser may reuse a preflight answer, seconds. */
const PREFLIGHT_MAX_AGE_S = "600";

/** Sets `Cache-Control: no-store` and `X-Content-Type-Options: nosniff` on every answer. */
export const securityHeaders: RequestHandler = (_req, res, next) => {
  res.setHeader("Cache-Control", "no-store");
  res.setHeader("X-Content-Type-Options", "nosniff");
  next();
};

/**
 * CORS and `OPTIONS` as the module header says.
 * @param origins allowed origins (`scheme://host[:port]`), or `["*"]` for any; empty = CORS off.
 */
export function cors(origins: readonly string[]): RequestHandler {
  const anyOrigin = origins.includes("*");
  const allowed = new Set(origins.map((o) => o.toLowerCase()));
  return (req, res, next) => {
    const origin = req.get("origin");
    const originAllowed = origin !== undefined && (anyOrigin || allowed.has(origin.toLowerCase()));
    if (origins.length > 0) res.vary("Origin");
    if (originAllowed) {
      res.setHeader("Access-Control-Allow-Origin", origin);
      res.setHeader("Access-Control-Expose-Headers", EXPOSED_HEADERS);
    }
    if (req.method !== "OPTIONS") return next();
    const requestedMethod = req.get("access-control-request-method");
    if (originAllowed && requestedMethod !== undefined) {
      res.setHeader("Access-Control-Allow-Methods", ALLOWED_METHODS);
      const requestedHeaders = req.get("access-control-request-headers")?.trim();
      if (requestedHeaders && HEADER_LIST.test(requestedHeaders)) {
        res.setHeader("Access-Control-Allow-Headers", requestedHeaders);
        res.vary("Access-Control-Request-Headers");
      }
      res.setHeader("Access-Control-Max-Age", PREFLIGHT_MAX_AGE_S);
    }
    res.status(204).end();
  };
}
