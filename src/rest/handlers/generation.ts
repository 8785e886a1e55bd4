/**
 * What the create handlers share: an abort signal for a client that goes away, the create
 * operation's options from the HTTP request (raw body, signal, SSE streaming), and the answer
 * (JSON with the engine time for the `x-switchyard-overhead-ms` header; streams answered already).
 */
import type { Request, Response } from "express";
import { AppError, ErrorCode } from "../../shared/errors.js";
import type { CreateOptions, Created } from "../../services/inference/use-cases/create-call.js";
import { sseTransport } from "../sse.js";

/** An AbortSignal that fires when the client closes the connection before the answer ended. */
export function abortOnClose(res: Response): AbortSignal {
  const controller = new AbortController();
  res.on("close", () => {
    if (!res.writableFinished) {
      controller.abort(new AppError(ErrorCode.ClientClosed, "The client closed the connection"));
    }
  });
  return controller.signal;
}

/** A create operation's options over HTTP: the body as received, abort on close, SSE when asked to stream. */
export function createOptions(req: Request, res: Response): CreateOptions {
  return { rawBody: req.body, signal: abortOnClose(res), stream: sseTransport(res) };
}

/** Answers what a create operation made: JSON, engine time in `res.locals.engineMs`; a stream has ended already. */
export function answerCreated<T>(res: Response, created: Created<T>): void {
  if ("streamed" in created) return;
  res.locals.engineMs = created.engineMs;
  sendJson(res, created.body);
}

/**
 * Sends `body` as `res.json` would on this app (no JSON replacer, spaces or escaping set; no
 * ETag), in one `end` with its `Content-Length` (issue 30, item 3): the same status, headers and
 * bytes, without Express's content-type and charset re-parsing, or its copy of a larger text into
 * a Buffer before the socket write.
 */
export function sendJson(res: Response, body: unknown): void {
  const text = JSON.stringify(body);
  res.setHeader("Content-Type", "application/json; charset=utf-8");
  res.setHeader("Content-Length", String(Buffer.byteLength(text)));
  res.end(text);
}
