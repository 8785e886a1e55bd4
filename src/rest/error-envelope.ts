/**
 * The REST error mapping (spec: Errors): every failure answers `{status_code, detail, extra?}`
 * with the caller's client dialect beside it (issue 27, item 1; `shared/error-dialects.ts`):
 * Anthropic's `type: "error"`, `error: {type, message}` on `/v1/messages` (and any path under
 * it), OpenAI's `error: {message, type, code, param}` on every other path (`dialectForPath`).
 * `AppError`s keep their status, detail and extra; body-parser failures become 400 (malformed
 * JSON, nested too deep) and 413 (too large); a database that is down or past a timeout a 503 with
 * `Retry-After` (issue 28, item 1); anything else is a 500 without internals. Node's own
 * refusals of malformed HTTP, before any route runs (parser errors, timeouts, an unknown `Expect`),
 * carry the same envelope (issue 5, item 3): `clientErrorHandler` and `expectationFailedHandler`.
 */
import { type IncomingMessage, STATUS_CODES, type ServerResponse } from "node:http";
import type { Duplex } from "node:stream";
import type { ErrorRequestHandler, Request, RequestHandler, Response } from "express";
import type { Logger } from "pino";
import {
  type ErrorDialect,
  type ErrorEnvelope,
  type Failure,
  appFailure,
  errorBody,
} from "../shared/error-dialects.js";
import { asDatabaseUnavailable } from "../shared/database-errors.js";
import { AppError, ErrorCode, echo } from "../shared/errors.js";
import { loggedPath } from "./log-path.js";

export type { ErrorEnvelope } from "../shared/error-dialects.js";

/**
 * Which dialect an error on `path` speaks (issue 27, item 1): `anthropic` for `/v1/messages` and
 * the paths under it, where the Anthropic SDK is the client; `openai` everywhere else — the
 * OpenAI-shaped `/v1` routes, and also the control plane, health, unknown paths and Node's own
 * refusals, where an extra `error` object beside the envelope costs nothing and any OpenAI-style
 * client shows the detail. Case and trailing slashes are ignored, as routing ignores them.
 */
export function dialectForPath(path: string): ErrorDialect {
  const p = path.split("?")[0].replace(/\/+$/, "").toLowerCase();
  return p === "/v1/messages" || p.startsWith("/v1/messages/") ? "anthropic" : "openai";
}

/** A failure Express or body-parser raised itself (not an `AppError`). */
function fromStatus(status: number, code: ErrorCode, detail: string, reason: string, extra?: unknown): Failure {
  return { status, code, detail, reason, ...(extra !== undefined ? { extra } : {}) };
}

/** Maps any thrown value to the failure it answers, and `Retry-After` seconds. */
export function toFailure(err: unknown): { failure: Failure; retryAfterS?: number } {
  if (err instanceof AppError) return { failure: appFailure(err), retryAfterS: err.retryAfterS };
  // The database stopped, frozen or past a timeout: 503 with Retry-After, never 500 (issue 28, item 1).
  const unavailable = asDatabaseUnavailable(err);
  if (unavailable) return { failure: appFailure(unavailable), retryAfterS: unavailable.retryAfterS };
  const type = (err as { type?: string })?.type;
  if (type === "entity.parse.failed") {
    return { failure: fromStatus(400, ErrorCode.InvalidRequest, "Malformed JSON body", "invalid_json") };
  }
  if (type === "entity.too.deep") {
    const detail = (err as Error).message;
    const extra = [{ field: "body", message: detail }];
    return { failure: fromStatus(400, ErrorCode.InvalidRequest, detail, "json_too_deep", extra) };
  }
  if (type === "entity.invalid.charset") {
    const detail = (err as Error).message;
    const extra = [{ field: "body", message: detail }];
    return { failure: fromStatus(400, ErrorCode.InvalidRequest, detail, "invalid_encoding", extra) };
  }
  if (type === "entity.unsupported.media.type") {
    const detail = (err as Error).message;
    return { failure: fromStatus(415, ErrorCode.InvalidRequest, detail, "unsupported_media_type") };
  }
  if (type === "entity.too.large") {
    return { failure: fromStatus(413, ErrorCode.PayloadTooLarge, "Request body too large", "payload_too_large") };
  }
  if (type === "encoding.unsupported" || type === "charset.unsupported") {
    return {
      failure: fromStatus(415, ErrorCode.InvalidRequest, "Unsupported body encoding", "unsupported_encoding"),
    };
  }
  const status = (err as { status?: number })?.status;
  if (typeof status === "number" && status >= 400 && status < 500) {
    return { failure: fromStatus(status, ErrorCode.InvalidRequest, "Invalid request", "invalid_request") };
  }
  return { failure: fromStatus(500, ErrorCode.Internal, "Internal server error", "internal") };
}

/** Maps any thrown value to an HTTP status, the error body in `dialect`, and `Retry-After` seconds. */
export function toEnvelope(
  err: unknown,
  dialect: ErrorDialect = "openai",
): { status: number; body: ErrorEnvelope; retryAfterS?: number } {
  const { failure, retryAfterS } = toFailure(err);
  return { status: failure.status, body: errorBody(failure, dialect), retryAfterS };
}

/** Writes `err` as the error body (JSON) in the dialect of the request's path. */
export function sendError(res: Response, err: unknown): void {
  const { status, body, retryAfterS } = toEnvelope(err, dialectForPath(res.req.originalUrl));
  if (retryAfterS !== undefined) res.setHeader("Retry-After", String(retryAfterS));
  res.status(status).json(body);
}

/** The error line of a request answered 5xx: the error, its request id, method and path. */
function logFailure(logger: Logger, err: unknown, req: Request, res: Response): void {
  logger.error(
    {
      err,
      requestId: res.locals.requestId as string | undefined,
      method: req.method,
      // The full path, query secrets blanked (issue 27, item 4), as the access line says it.
      path: loggedPath(req.originalUrl),
    },
    "request failed",
  );
}

/** Express error handler: answers the envelope; logs 5xx with the request's method and path (never bodies). */
export function errorMiddleware(logger: Logger): ErrorRequestHandler {
  return (err, req, res, _next) => {
    const { status } = toFailure(err).failure;
    if (status >= 500) logFailure(logger, err, req, res);
    if (res.headersSent) {
      res.end();
      return;
    }
    sendError(res, err);
  };
}

/**
 * Express error handler for `/graphql`: failures before Apollo runs (malformed JSON, a body over
 * `graphqlMaxPayloadBytes`, a body that is not JSON: 415) answer in the GraphQL error format,
 * `{errors: [{message, extensions: {code, status_code, extra}}]}`, with the envelope's status and
 * detail (issue 5, item 1).
 */
export function graphqlErrorMiddleware(logger: Logger): ErrorRequestHandler {
  return (err, req, res, _next) => {
    if (toFailure(err).failure.status >= 500) logFailure(logger, err, req, res);
    if (res.headersSent) {
      res.end();
      return;
    }
    sendGraphqlError(res, err);
  };
}

/**
 * Writes `err` in the GraphQL error format with the envelope's status (and `Retry-After`), as
 * `/graphql` answers failures before Apollo runs: `code` is `PAYLOAD_TOO_LARGE` (413),
 * `UNSUPPORTED_MEDIA_TYPE` (415), `BAD_REQUEST` (other 4xx), `DATABASE_UNAVAILABLE` (the database's 503, issue 28 item 1) or
 * `INTERNAL`.
 */
export function sendGraphqlError(res: Response, err: unknown): void {
  const { failure, retryAfterS } = toFailure(err);
  const status = failure.status;
  if (retryAfterS !== undefined) res.setHeader("Retry-After", String(retryAfterS));
  const code =
    status === 413
      ? "PAYLOAD_TOO_LARGE"
      : status === 415
        ? "UNSUPPORTED_MEDIA_TYPE"
        : status < 500
          ? "BAD_REQUEST"
          : failure.code === ErrorCode.DatabaseUnavailable
            ? "DATABASE_UNAVAILABLE"
            : "INTERNAL";
  res
    .status(status)
    .json({ errors: [{ message: failure.detail, extensions: { code, status_code: status, extra: null } }] });
}

/** Unknown paths: 404 with the envelope (the path repeated at most `MAX_ECHO_CHARS` long). */
export const notFoundHandler: RequestHandler = (req, _res, next) => {
  next(new AppError(ErrorCode.NotFound, `No route for ${req.method} ${echo(req.path)}`));
};

/** Headers of answers written outside Express (the ones `http-headers.ts` sets inside it). */
function rawHeaders(body: string): Record<string, string> {
  return {
    "Content-Type": "application/json; charset=utf-8",
    "Content-Length": String(Buffer.byteLength(body)),
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    Connection: "close",
  };
}

/**
 * Status and error body for an error Node's HTTP parser or timers raised (codes as Node maps
 * them), in the OpenAI dialect: the request's path is not known (yet) when its parse fails.
 */
export function clientErrorEnvelope(code: string | undefined): ErrorEnvelope {
  const failure = (() => {
    switch (code) {
      case "HPE_HEADER_OVERFLOW":
        return fromStatus(431, ErrorCode.InvalidRequest, "Request headers too large", "headers_too_large");
      case "HPE_CHUNK_EXTENSIONS_OVERFLOW":
        return fromStatus(413, ErrorCode.PayloadTooLarge, "Chunk extensions too large", "payload_too_large");
      case "ERR_HTTP_REQUEST_TIMEOUT":
        return fromStatus(408, ErrorCode.InvalidRequest, "Request not received in time", "request_timeout");
      default:
        return fromStatus(400, ErrorCode.InvalidRequest, "Malformed HTTP request", "malformed_http");
    }
  })();
  return errorBody(failure, "openai");
}

/**
 * The method of the request Node refused, where it can be known: the parsed request's (a body that
 * came too slowly), else the first word of the bytes Node hands with a parse error when they start
 * a request line (`HEAD /… HTTP/1.1`). Undefined when neither says (a request line that arrived in
 * pieces before the piece that overflowed, a header that never ended).
 */
export function refusedMethod(
  err: { rawPacket?: unknown },
  inFlight: { req?: { method?: string } } | null | undefined,
): string | undefined {
  if (inFlight?.req?.method) return inFlight.req.method;
  if (!Buffer.isBuffer(err.rawPacket)) return undefined;
  return /^([A-Z]{1,20}) [^ ]/.exec(err.rawPacket.subarray(0, 24).toString("latin1"))?.[1];
}

/**
 * `server.on("clientError")`: answers the envelope as a raw HTTP/1.1 response and closes the
 * connection, unless the socket is gone or an answer already started on it (then it only closes,
 * as Node does). An answer to `HEAD` has no body (RFC 9110 §9.3.2; issue 28, item 4), only the
 * status and headers.
 */
export function clientErrorHandler(): (err: Error & { code?: string; rawPacket?: unknown }, socket: Duplex) => void {
  return (err, socket) => {
    if (err.code === "ECONNRESET" || !socket.writable) {
      socket.destroy();
      return;
    }
    const inFlight = (socket as Duplex & { _httpMessage?: ServerResponse | null })._httpMessage;
    if (inFlight?.headersSent) {
      socket.destroy();
      return;
    }
    const envelope = clientErrorEnvelope(err.code);
    const body = JSON.stringify(envelope);
    const head = Object.entries(rawHeaders(body))
      .map(([k, v]) => `${k}: ${v}\r\n`)
      .join("");
    const content = refusedMethod(err, inFlight) === "HEAD" ? "" : body;
    socket.end(`HTTP/1.1 ${envelope.status_code} ${STATUS_CODES[envelope.status_code]}\r\n${head}\r\n${content}`);
    // A peer that keeps sending would hold the half-closed socket open: close it soon regardless.
    setTimeout(() => socket.destroy(), 1_000).unref();
  };
}

/** `server.on("checkExpectation")`: an `Expect` other than `100-continue` gets 417 with the envelope. */
export function expectationFailedHandler(req: IncomingMessage, res: ServerResponse): void {
  const failure = fromStatus(
    417,
    ErrorCode.InvalidRequest,
    "Unsupported Expect header: only 100-continue is supported",
    "expectation_failed",
  );
  const body = JSON.stringify(errorBody(failure, dialectForPath(req.url ?? "/")));
  res.writeHead(417, rawHeaders(body));
  res.end(body);
}
