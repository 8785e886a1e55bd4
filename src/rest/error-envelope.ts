/**
 * The REST error mapping (spec: Errors): every failure answers `{status_code, detail, extra?}`.
 * `AppError`s keep their status, detail and extra; body-parser failures become 400 (malformed
 * JSON, nested too deep) and 413 (too large); anything else is a 500 without internals. Node's own
 * refusals of malformed HTTP, before any route runs (parser errors, timeouts, an unknown `Expect`),
 * carry the same envelope (issue 5, item 3): `clientErrorHandler` and `expectationFailedHandler`.
 */
import { type IncomingMessage, STATUS_CODES, type ServerResponse } from "node:http";
import type { Duplex } from "node:stream";
import type { ErrorRequestHandler, Request, RequestHandler, Response } from "express";
import type { Logger } from "pino";
import { AppError, ErrorCode } from "../shared/errors.js";
import { loggedPath } from "./log-path.js";

export interface ErrorEnvelope {
  status_code: number;
  detail: string;
  extra?: unknown;
}

/** Maps any thrown value to an HTTP status, envelope and `Retry-After` seconds. */
export function toEnvelope(err: unknown): { status: number; body: ErrorEnvelope; retryAfterS?: number } {
  if (err instanceof AppError) {
    const body: ErrorEnvelope = { status_code: err.status, detail: err.detail };
    if (err.extra !== undefined) body.extra = err.extra;
    return { status: err.status, body, retryAfterS: err.retryAfterS };
  }
  const type = (err as { type?: string })?.type;
  if (type === "entity.parse.failed") {
    return { status: 400, body: { status_code: 400, detail: "Malformed JSON body" } };
  }
  if (type === "entity.too.deep") {
    const detail = (err as Error).message;
    return { status: 400, body: { status_code: 400, detail, extra: [{ field: "body", message: detail }] } };
  }
  if (type === "entity.too.large") {
    return { status: 413, body: { status_code: 413, detail: "Request body too large" } };
  }
  if (type === "encoding.unsupported" || type === "charset.unsupported") {
    return { status: 415, body: { status_code: 415, detail: "Unsupported body encoding" } };
  }
  const status = (err as { status?: number })?.status;
  if (typeof status === "number" && status >= 400 && status < 500) {
    return { status, body: { status_code: status, detail: "Invalid request" } };
  }
  return { status: 500, body: { status_code: 500, detail: "Internal server error" } };
}

/** Writes `err` as the envelope (JSON) unless headers went out already. */
export function sendError(res: Response, err: unknown): void {
  const { status, body, retryAfterS } = toEnvelope(err);
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
    const { status } = toEnvelope(err);
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
 * `graphqlMaxPayloadBytes`) answer in the GraphQL error format, `{errors: [{message, extensions:
 * {code, status_code, extra}}]}`, with the envelope's status and detail (issue 5, item 1).
 */
export function graphqlErrorMiddleware(logger: Logger): ErrorRequestHandler {
  return (err, req, res, _next) => {
    const { status, body } = toEnvelope(err);
    if (status >= 500) logFailure(logger, err, req, res);
    if (res.headersSent) {
      res.end();
      return;
    }
    const code = status === 413 ? "PAYLOAD_TOO_LARGE" : status < 500 ? "BAD_REQUEST" : "INTERNAL";
    res
      .status(status)
      .json({ errors: [{ message: body.detail, extensions: { code, status_code: status, extra: null } }] });
  };
}

/** Unknown paths: 404 with the envelope. */
export const notFoundHandler: RequestHandler = (req, _res, next) => {
  next(new AppError(ErrorCode.NotFound, `No route for ${req.method} ${req.path}`));
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

/** Status and envelope for an error Node's HTTP parser or timers raised (codes as Node maps them). */
export function clientErrorEnvelope(code: string | undefined): ErrorEnvelope {
  switch (code) {
    case "HPE_HEADER_OVERFLOW":
      return { status_code: 431, detail: "Request headers too large" };
    case "HPE_CHUNK_EXTENSIONS_OVERFLOW":
      return { status_code: 413, detail: "Chunk extensions too large" };
    case "ERR_HTTP_REQUEST_TIMEOUT":
      return { status_code: 408, detail: "Request not received in time" };
    default:
      return { status_code: 400, detail: "Malformed HTTP request" };
  }
}

/**
 * `server.on("clientError")`: answers the envelope as a raw HTTP/1.1 response and closes the
 * connection, unless the socket is gone or an answer already started on it (then it only closes,
 * as Node does).
 */
export function clientErrorHandler(): (err: Error & { code?: string }, socket: Duplex) => void {
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
    socket.end(`HTTP/1.1 ${envelope.status_code} ${STATUS_CODES[envelope.status_code]}\r\n${head}\r\n${body}`);
    // A peer that keeps sending would hold the half-closed socket open: close it soon regardless.
    setTimeout(() => socket.destroy(), 1_000).unref();
  };
}

/** `server.on("checkExpectation")`: an `Expect` other than `100-continue` gets 417 with the envelope. */
export function expectationFailedHandler(_req: IncomingMessage, res: ServerResponse): void {
  const body = JSON.stringify({
    status_code: 417,
    detail: "Unsupported Expect header: only 100-continue is supported",
  });
  res.writeHead(417, rawHeaders(body));
  res.end(body);
}
