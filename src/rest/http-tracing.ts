/**
 * A span per HTTP request (issue 29, item 2): a server span named `<METHOD> <route pattern>`
 * (`POST /v1/chat/completions`; `/graphql`; the bare method for what no route matched), child of
 * the caller's W3C `traceparent` when one came, with the method, the path (secrets blanked as in
 * the logs, `loggedPath`; no query), the route, the status and our `x-request-id`; 5xx answers
 * are errors. Its trace id is answered in `x-trace-id`. The route handlers run inside its scope
 * (`inRequestScope`), so the engine call and every log line of the request hang from it.
 * Not installed when tracing is off.
 */
import type { RequestHandler, Response } from "express";
import { type Attributes, SpanKind, SpanStatusCode } from "@opentelemetry/api";
import { type TraceScope, type Tracing, runInScope } from "../shared/tracing.js";
import { loggedPath } from "./log-path.js";

/** Where the request's scope is kept between the middleware and its handler. */
const SCOPE = "traceScope";

/** A path segment `loggedPath` would blank starts like one of these (case-insensitive, maybe %-encoded). */
const MAY_HOLD_CREDENTIAL = /inv_|sk_|%/i;

/** The answer header carrying the request's trace id (32 hex digits). */
export const TRACE_ID_HEADER = "x-trace-id";

/** The middleware starting and ending each request's span (after `timing`, which sets the request id). */
export function traceRequests(tracing: Tracing): RequestHandler {
  return (req, res, next) => {
    const raw = req.originalUrl.split("?", 1)[0];
    // Only a path that may hold one of our credentials pays for blanking it (`loggedPath`).
    const path = MAY_HOLD_CREDENTIAL.test(raw) ? loggedPath(raw) : raw;
    const scope = tracing.start(req.method, {
      kind: SpanKind.SERVER,
      parent: req.headers,
      attributes: {
        "http.request.method": req.method,
        "url.path": path,
        // This server speaks plain HTTP (TLS ends at a proxy in front of it).
        "url.scheme": "http",
        "switchyard.request_id": res.locals.requestId as string,
      },
    });
    if (!scope) return next();
    res.locals[SCOPE] = scope;
    res.setHeader(TRACE_ID_HEADER, scope.span.spanContext().traceId);
    // `close` comes once per answer, after `finish` when it was written in full (then
    // `writableFinished`) and alone when the client went away first: one listener ends the span.
    res.on("close", () => {
      const route =
        (req.route as { path?: string } | undefined)?.path ??
        (req.originalUrl.startsWith("/graphql") ? "/graphql" : undefined);
      const span = scope.span;
      const attributes: Attributes = { "http.response.status_code": res.statusCode };
      if (route) {
        span.updateName(`${req.method} ${route}`);
        attributes["http.route"] = route;
      }
      if (!res.writableFinished) attributes["switchyard.client_closed"] = true;
      if (res.statusCode >= 500) {
        attributes["error.type"] = String(res.statusCode);
        span.setStatus({ code: SpanStatusCode.ERROR });
      }
      span.setAttributes(attributes);
      span.end();
    });
    runInScope(scope, next);
  };
}

/**
 * Runs a route handler inside its request's span scope (set by `traceRequests`; body parsing
 * in between loses it), or as is when the request is not traced.
 */
export function inRequestScope<T>(res: Response, fn: () => T): T {
  return runInScope(res.locals[SCOPE] as TraceScope | undefined, fn);
}

/** `trace_id` and `span_id` of a traced request's span, for its access log line (written after the scope). */
export function requestTraceFields(res: Response): { trace_id: string; span_id: string } | undefined {
  const scope = res.locals[SCOPE] as TraceScope | undefined;
  if (!scope) return undefined;
  const { traceId, spanId } = scope.span.spanContext();
  return { trace_id: traceId, span_id: spanId };
}
