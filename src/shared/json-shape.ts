/**
 * Shape bounds of JSON text, checked on the raw bytes before `JSON.parse` runs (issue 5, item 3):
 * one pass, O(bytes), no recursion. Used by the REST body parser and by the batch body reader
 * (issue 7), which parses each item on its own.
 */

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
/** The structural bytes of JSON text (UTF-8), for scanners over raw bodies. */
export const JSON_BYTES = {
  QUOTE: 0x22,
  BACKSLASH: 0x5c,
  OPEN_BRACKET: 0x5b,
  CLOSE_BRACKET: 0x5d,
  OPEN_BRACE: 0x7b,
  CLOSE_BRACE: 0x7d,
  COMMA: 0x2c,
  COLON: 0x3a,
} as const;
const { QUOTE, BACKSLASH, OPEN_BRACKET, CLOSE_BRACKET, OPEN_BRACE, CLOSE_BRACE, COMMA, COLON } = JSON_BYTES;

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
