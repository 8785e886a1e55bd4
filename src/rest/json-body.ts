/**
 * JSON request bodies (issue 5, item 3): `express.json` with a nesting bound checked on the raw
 * bytes before `JSON.parse` runs, so a 10,000-level body is a 400 before any work rather than a
 * stack overflow somewhere later (serialising, storing). The scan is one pass, O(bytes), with no
 * recursion and no allocation for UTF-8 bodies.
 *
 * Hostile bytes (issue 28, item 4): a body must be valid in its charset (invalid UTF-8 is a 400,
 * never text stored with U+FFFD in its place), and a body must say it is JSON — `Content-Type:
 * application/json` or any `…/…+json` type — else 415 before it is read. A request without a
 * body (no `Content-Length`, or 0) needs no content type. The type rule also keeps browsers'
 * no-preflight ("simple") requests, whose types are form and text types, away from every route.
 */
import { isUtf8 } from "node:buffer";
import type { IncomingMessage } from "node:http";
import { TextDecoder } from "node:util";
import express, { type NextFunction, type Request, type RequestHandler, type Response } from "express";
import {
  type JsonShapeProblem,
  MAX_JSON_DEPTH,
  MAX_JSON_MEMBERS,
  MAX_JSON_VALUES,
  jsonShapeProblem,
} from "../shared/json-shape.js";

export { MAX_JSON_DEPTH, MAX_JSON_MEMBERS, MAX_JSON_VALUES, jsonShapeProblem };

/** A body-parser `verify` failure; `toEnvelope` maps `type: entity.too.deep` to a 400. */
class BodyTooDeepError extends Error {
  readonly status = 400;
  readonly type = "entity.too.deep";
  constructor(problem: Exclude<JsonShapeProblem, null>) {
    super(
      problem === "depth"
        ? `JSON body nested deeper than ${MAX_JSON_DEPTH} levels`
        : problem === "members"
          ? `JSON body has more than ${MAX_JSON_MEMBERS} object members`
          : `JSON body has more than ${MAX_JSON_VALUES} values`,
    );
  }
}

/** A body in a charset this check cannot read; mapped to 415 like body-parser's own. */
class BodyCharsetError extends Error {
  readonly status = 415;
  readonly type = "charset.unsupported";
}

/** A body whose bytes are not valid in its charset; `toEnvelope` maps it to a 400 naming `body`. */
export class BodyEncodingError extends Error {
  readonly status = 400;
  readonly type = "entity.invalid.charset";
  constructor(charset: string) {
    super(`The body is not valid ${charset.toUpperCase()}`);
  }
}

/** A body that does not say it is JSON; `toEnvelope` maps it to 415. */
export class BodyMediaTypeError extends Error {
  readonly status = 415;
  readonly type = "entity.unsupported.media.type";
  constructor(contentType: string | undefined) {
    super(
      contentType === undefined
        ? "A request body needs Content-Type: application/json"
        : "The body must be JSON: send Content-Type: application/json (or a +json type)",
    );
  }
}

/**
 * True for a JSON media type: `application/json` or any `type/subtype+json`, parameters (a
 * charset) allowed, case ignored (RFC 9110 §8.3.1).
 */
export function isJsonMediaType(contentType: string | undefined): boolean {
  if (contentType === undefined) return false;
  const essence = contentType.split(";", 1)[0].trim().toLowerCase();
  return essence === "application/json" || /^[a-z0-9!#$&^_.+-]+\/[a-z0-9!#$&^_.+-]+\+json$/.test(essence);
}

/** True when a request carries body bytes: chunked, or a `Content-Length` above 0. */
export function hasBodyBytes(req: IncomingMessage): boolean {
  if (req.headers["transfer-encoding"] !== undefined) return true;
  const length = req.headers["content-length"];
  return length !== undefined && !/^0+$/.test(length);
}

/**
 * @throws BodyMediaTypeError (415) when `req` carries a body that does not say it is JSON
 *   (`isJsonMediaType`); a request without body bytes passes whatever its type.
 */
export function assertJsonMediaType(req: IncomingMessage): void {
  if (hasBodyBytes(req) && !isJsonMediaType(req.headers["content-type"])) {
    throw new BodyMediaTypeError(req.headers["content-type"]);
  }
}

/**
 * Middleware form of `assertJsonMediaType` (a 415 through the error middleware before the body is
 * read); `/graphql` mounts it before its own parser.
 */
export function requireJsonMediaType(req: Request, _res: Response, next: NextFunction): void {
  try {
    assertJsonMediaType(req);
  } catch (err) {
    return next(err);
  }
  next();
}

/** @throws BodyEncodingError (400) when `buf` is not valid UTF-8 (O(bytes), native). */
export function assertUtf8(buf: Buffer): void {
  if (!isUtf8(buf)) throw new BodyEncodingError("utf-8");
}

/**
 * body-parser's `verify` hook: throws before parsing when the body is not valid in its charset
 * (400) or nests deeper than `MAX_JSON_DEPTH` (400) — both through `toEnvelope`. Exported for
 * other JSON parsers (`/graphql`).
 */
export function verifyJsonDepth(_req: IncomingMessage, _res: unknown, buf: Buffer, encoding: string): void {
  const charset = (encoding || "utf-8").toLowerCase();
  if (charset === "utf-8" || charset === "utf8") {
    assertUtf8(buf);
    const problem = jsonShapeProblem(buf, MAX_JSON_DEPTH, MAX_JSON_MEMBERS, MAX_JSON_VALUES);
    if (problem) throw new BodyTooDeepError(problem);
    return;
  }
  // UTF-16 and the like: bracket bytes may sit inside other characters, so read characters.
  let decoder: TextDecoder;
  try {
    decoder = new TextDecoder(charset, { fatal: true });
  } catch {
    throw new BodyCharsetError(`unsupported charset "${charset.toUpperCase()}"`);
  }
  let text: string;
  try {
    text = decoder.decode(buf);
  } catch {
    throw new BodyEncodingError(charset);
  }
  const problem = jsonShapeProblem(text, MAX_JSON_DEPTH, MAX_JSON_MEMBERS, MAX_JSON_VALUES);
  if (problem) throw new BodyTooDeepError(problem);
}

/** The size of each parsed request body as received (after any content decoding), bytes. */
const receivedBytes = new WeakMap<IncomingMessage, number>();

/**
 * The JSON body parser of every REST route: a body must say it is JSON (415 otherwise, before it
 * is read: `assertJsonMediaType`), up to `limitBytes` (413 above), valid in its charset and nested
 * at most `MAX_JSON_DEPTH` (400). The body's size as received is kept for `bodyBytes`. The common
 * body (`plainJsonBody`) is read by `readPlainJson`, the rest by body-parser, with the same result.
 */
export function jsonBody(limitBytes: number): RequestHandler {
  const verify = (req: IncomingMessage, res: unknown, buf: Buffer, encoding: string) => {
    verifyJsonDepth(req, res, buf, encoding);
    receivedBytes.set(req, buf.length);
  };
  const parse = express.json({
    limit: limitBytes,
    // The type was checked first; a body-less request with any type reads as no body.
    type: () => true,
    verify,
  });
  return (req, res, next) => {
    try {
      assertJsonMediaType(req);
    } catch (err) {
      return next(err);
    }
    const length = plainJsonBody(req, limitBytes);
    if (length === undefined) return parse(req, res, next);
    readPlainJson(req, length, (buf) => verify(req, res, buf, "utf-8"), next);
  };
}

/** `Content-Type` values (lower case) of a plain JSON body: no parameter but a UTF-8 charset. */
const PLAIN_JSON_TYPES = new Set([
  "application/json",
  "application/json; charset=utf-8",
  "application/json;charset=utf-8",
]);

/** A `Content-Length` value of digits only. */
const DIGITS = /^[0-9]+$/;

/**
 * The length of `req`'s body when it is the common case this module reads itself (issue 30, item 3):
 * a fresh, readable request with a `Content-Length` from 1 to `limitBytes`, no `Content-Encoding`
 * or `Transfer-Encoding`, and a plain JSON type (`PLAIN_JSON_TYPES`). Undefined for anything else
 * — body-parser reads those (and answers their 413s, 415s and compressed bodies) as before.
 */
function plainJsonBody(req: IncomingMessage, limitBytes: number): number | undefined {
  const headers = req.headers;
  if (headers["content-encoding"] !== undefined || headers["transfer-encoding"] !== undefined) return undefined;
  const type = headers["content-type"];
  if (type === undefined || !PLAIN_JSON_TYPES.has(type.toLowerCase())) return undefined;
  const declared = headers["content-length"];
  if (declared === undefined || !DIGITS.test(declared)) return undefined;
  const length = Number(declared);
  if (length === 0 || length > limitBytes) return undefined;
  // body-parser's "already read" test (on-finished) and raw-body's readable-stream checks.
  const socket = req.socket as IncomingMessage["socket"] | null;
  const upgrade = (req as { upgrade?: boolean }).upgrade;
  if (upgrade || !socket || !socket.readable || (req.complete && !req.readable)) return undefined;
  if (!req.readable || req.readableEncoding !== null) return undefined;
  return length;
}

/** First non-whitespace character of a JSON text (RFC 8259 whitespace), as body-parser's strict check finds it. */
const FIRST_NON_WHITESPACE = /^[ \t\n\r]*([^ \t\n\r]|$)/;

/**
 * `text` parsed as body-parser's strict JSON parser does: an empty text is `{}`, anything but an
 * object or an array (after whitespace) is refused.
 * @throws SyntaxError for malformed or non-strict JSON.
 */
function strictJson(text: string): unknown {
  if (text.length === 0) return {};
  if (text[0] !== "{" && text[0] !== "[") {
    const first = FIRST_NON_WHITESPACE.exec(text)?.[1];
    if (first !== "{" && first !== "[") throw new SyntaxError("strict violation");
  }
  return JSON.parse(text) as unknown;
}

/** A body-parser style failure (`toEnvelope` reads `type` and `status`). */
function bodyError(message: string, status: number, type: string, extra: Record<string, unknown> = {}): Error {
  return Object.assign(new Error(message), { status, statusCode: status, expose: true, type, ...extra });
}

/**
 * Reads a `plainJsonBody` of `length` bytes and sets `req.body` as body-parser's JSON parser
 * would: the bytes verified (`verify`: UTF-8, nesting; its error passed on), a leading BOM
 * dropped, strict JSON (an object or an array; anything else, or malformed JSON, is
 * `entity.parse.failed`, 400). A request the client aborts is `request.aborted` (400), as raw-body
 * says it. One listener set, no decoder and no async resource per request.
 */
function readPlainJson(
  req: IncomingMessage & { body?: unknown },
  length: number,
  verify: (buf: Buffer) => void,
  next: NextFunction,
): void {
  if (!("body" in req)) req.body = undefined;
  const chunks: Buffer[] = [];
  let received = 0;
  let complete = false;
  const cleanup = () => {
    req.off("aborted", onAborted);
    req.off("data", onData);
    req.off("end", onEnd);
    req.off("error", onEnd);
    req.off("close", cleanup);
  };
  const fail = (err: Error) => {
    complete = true;
    cleanup();
    req.pause();
    next(err);
  };
  function onAborted() {
    if (complete) return;
    fail(bodyError("request aborted", 400, "request.aborted", { code: "ECONNABORTED", expected: length, received }));
  }
  function onData(chunk: Buffer) {
    if (complete) return;
    received += chunk.length;
    chunks.push(chunk);
  }
  function onEnd(err?: Error) {
    if (complete) return;
    if (err) {
      const status = (err as { status?: unknown }).status;
      return fail(typeof status === "number" ? err : Object.assign(err, { status: 400, statusCode: 400 }));
    }
    if (received !== length) {
      return fail(bodyError("request size did not match content length", 400, "request.size.invalid"));
    }
    complete = true;
    cleanup();
    const buf = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, received);
    try {
      verify(buf);
    } catch (verifyErr) {
      return next(verifyErr);
    }
    let text = buf.toString("utf8");
    if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
    try {
      req.body = strictJson(text);
    } catch (parseErr) {
      return next(bodyError((parseErr as Error).message, 400, "entity.parse.failed"));
    }
    next();
  }
  req.on("aborted", onAborted);
  req.on("close", cleanup);
  req.on("data", onData);
  req.on("end", onEnd);
  req.on("error", onEnd);
}

/**
 * The size of `req`'s JSON body as received, in bytes (after gzip/deflate decoding, as the
 * parser's limit counts it); undefined when `jsonBody` did not parse one. A limit on the body
 * (DESIGN §3 Decisions: over 1 MiB → 413) is a limit on these bytes, not on the value
 * re-serialised, which can be larger (`1e20` is written back as 21 digits).
 */
export function bodyBytes(req: IncomingMessage): number | undefined {
  return receivedBytes.get(req);
}
