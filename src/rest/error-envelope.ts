/**
 * The REST error mapping (spec: Errors): every failure answers `{status_code, detail, extra?}`.
 * `AppError`s keep their status, detail and extra; body-parser failures become 400 (malformed
 * JSON, nested too deep) and 413 (too large); anything else is a 500 without internals.
 */
import type { ErrorRequestHandler, RequestHandler, Response } from "express";
import type { Logger } from "pino";
import { AppError, ErrorCode } from "../services/errors.js";

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

/** Express error handler: answers the envelope; logs 5xx with the request's method and path (never bodies). */
export function errorMiddleware(logger: Logger): ErrorRequestHandler {
  return (err, req, res, _next) => {
    const { status } = toEnvelope(err);
    if (status >= 500) logger.error({ err, method: req.method, path: req.path }, "request failed");
    if (res.headersSent) {
      res.end();
      return;
    }
    sendError(res, err);
  };
}

/** Unknown paths: 404 with the envelope. */
export const notFoundHandler: RequestHandler = (req, _res, next) => {
  next(new AppError(ErrorCode.NotFound, `No route for ${req.method} ${req.path}`));
};
