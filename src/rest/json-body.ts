/**
 * JSON request bodies (issue 5, item 3): `express.json` with a nesting bound checked on the raw
 * bytes before `JSON.parse` runs, so a 10,000-level body is a 400 before any work rather than a
 * stack overflow somewhere later (serialising, storing). The scan is one pass, O(bytes), with no
 * recursion and no allocation for UTF-8 bodies.
 */
import type { IncomingMessage } from "node:http";
import { TextDecoder } from "node:util";
import express, { type RequestHandler } from "express";

/** Deepest accepted nesting of arrays and objects in a JSON body (`[[1]]` is depth 2). */
export const MAX_JSON_DEPTH = 64;
/**
 * Most object members (colons) and most values after the first of each array or object (commas)
 * in one body. JSON.parse of a million small members took 1.4 s on the main thread, before
 * authentication; 100,000 members cover 10,000 chat messages five times over, and 500,000 values
 * cover OpenAI's 300,000-token embeddings request given as token ids (issue 5, item 1).
 */
export const MAX_JSON_MEMBERS = 100_000;
export const MAX_JSON_VALUES = 500_000;
const COLON = 0x3a;
const COMMA = 0x2c;

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;

/** What a body breaks, if anything: nesting, or the number of members or values. */
export type JsonShapeProblem = "depth" | "members" | "values" | null;

/**
 * The first shape bound JSON `text` breaks, counting brackets, colons and commas outside
 * strings. Malformed JSON is not judged here (JSON.parse refuses it next).
 */
export function jsonShapeProblem(
  text: Uint8Array | string,
  maxDepth: number,
  maxMembers = Number.MAX_SAFE_INTEGER,
  maxValues = Number.MAX_SAFE_INTEGER,
): JsonShapeProblem {
  const isString = typeof text === "string";
  let depth = 0;
  let members = 0;
  let values = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = isString ? text.charCodeAt(i) : text[i];
    if (inString) {
      if (c === BACKSLASH) i++;
      else if (c === QUOTE) inString = false;
    } else if (c === QUOTE) {
      inString = true;
    } else if (c === OPEN_BRACKET || c === OPEN_BRACE) {
      if (++depth > maxDepth) return "depth";
    } else if (c === CLOSE_BRACKET || c === CLOSE_BRACE) {
      depth--;
    } else if (c === COLON) {
      if (++members > maxMembers) return "members";
    } else if (c === COMMA) {
      if (++values > maxValues) return "values";
    }
  }
  return null;
}

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

/**
 * The JSON body parser of every REST route: any content type is read as JSON (curl -d sends form
 * encoding by default), up to `limitBytes` (413 above), nested at most `MAX_JSON_DEPTH` (400).
 */
export function jsonBody(limitBytes: number): RequestHandler {
  return express.json({ limit: limitBytes, type: () => true, verify: verifyJsonDepth });
}
