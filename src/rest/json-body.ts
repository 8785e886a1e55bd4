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
 * at most `MAX_JSON_DEPTH` (400). The body's size as received is kept for `bodyBytes`.
 */
export function jsonBody(limitBytes: number): RequestHandler {
  const parse = express.json({
    limit: limitBytes,
    // The type was checked first; a body-less request with any type reads as no body.
    type: () => true,
    verify: (req, res, buf, encoding) => {
      verifyJsonDepth(req, res, buf, encoding);
      receivedBytes.set(req, buf.length);
    },
  });
  return (req, res, next) => {
    try {
      assertJsonMediaType(req);
    } catch (err) {
      return next(err);
    }
    return parse(req, res, next);
  };
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
