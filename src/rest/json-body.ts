/**
 * JSON request bodies (issue 5, item 3): `express.json` with a nesting bound checked on the raw
 * bytes before `JSON.parse` runs, so a 10,000-level body is a 400 before any work rather than a
 * stack overflow somewhere later (serialising, storing). The scan is one pass, O(bytes), with no
 * recursion and no allocation for UTF-8 bodies.
 */
import type { IncomingMessage } from "node:http";
import { TextDecoder } from "node:util";
import express, { type RequestHandler } from "express";
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

/**
 * body-parser's `verify` hook: throws before parsing when the body nests deeper than
 * `MAX_JSON_DEPTH` (a 400 through `toEnvelope`). Exported for other JSON parsers (`/graphql`).
 */
export function verifyJsonDepth(_req: IncomingMessage, _res: unknown, buf: Buffer, encoding: string): void {
  const charset = (encoding || "utf-8").toLowerCase();
  if (charset === "utf-8" || charset === "utf8") {
    const problem = jsonShapeProblem(buf, MAX_JSON_DEPTH, MAX_JSON_MEMBERS, MAX_JSON_VALUES);
    if (problem) throw new BodyTooDeepError(problem);
    return;
  }
  // UTF-16 and the like: bracket bytes may sit inside other characters, so read characters.
  let text: string;
  try {
    text = new TextDecoder(charset).decode(buf);
  } catch {
    throw new BodyCharsetError(`unsupported charset "${charset.toUpperCase()}"`);
  }
  const problem = jsonShapeProblem(text, MAX_JSON_DEPTH, MAX_JSON_MEMBERS, MAX_JSON_VALUES);
  if (problem) throw new BodyTooDeepError(problem);
}

/** The size of each parsed request body as received (after any content decoding), bytes. */
const receivedBytes = new WeakMap<IncomingMessage, number>();

/**
 * The JSON body parser of every REST route: any content type is read as JSON (curl -d sends form
 * encoding by default), up to `limitBytes` (413 above), nested at most `MAX_JSON_DEPTH` (400).
 * The body's size as received is kept for `bodyBytes`.
 */
export function jsonBody(limitBytes: number): RequestHandler {
  return express.json({
    limit: limitBytes,
    type: () => true,
    verify: (req, res, buf, encoding) => {
      verifyJsonDepth(req, res, buf, encoding);
      receivedBytes.set(req, buf.length);
    },
  });
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
