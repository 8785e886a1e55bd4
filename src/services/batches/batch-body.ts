/**
 * Reads a `POST /v1/batches` body of up to 200 MB without stalling the event loop (issue 7,
 * item 1). `JSON.parse` of the whole body would hold the main thread for seconds; instead one
 * pass over the bytes finds the top-level members and the boundaries of each `requests[i]`
 * (tracking strings and bracket depth only), yielding to the event loop every few MB, and each
 * item is then parsed on its own by `JSON.parse`, which also judges its syntax. Each item and each
 * other member is bounded (`maxMemberBytes`), so no single parse or scan runs long.
 */
import { AppError, ErrorCode } from "../../shared/errors.js";
import {
  JSON_BYTES,
  MAX_JSON_DEPTH,
  MAX_JSON_MEMBERS,
  MAX_JSON_VALUES,
  jsonShapeProblem,
} from "../../shared/json-shape.js";

/** Where one `requests[i]` sits in the body, as byte offsets (end exclusive). */
export interface ItemSpan {
  start: number;
  end: number;
}

/** The members a batch body may have besides `requests` (others are checked as JSON and dropped). */
export const BATCH_MEMBERS = ["window", "completion_window", "metadata"] as const;
export type BatchMember = (typeof BATCH_MEMBERS)[number];

/** A scanned batch body: its known members other than `requests`, parsed, and the items' spans. */
export interface ScannedBatchBody {
  members: Partial<Record<BatchMember, unknown>>;
  /** Null when the body has no `requests` member (or its last one is not an array); [] for an empty array. */
  items: ItemSpan[] | null;
  /** When the last `requests` member is not an array, its parsed value. */
  requestsValue?: unknown;
}

export interface BatchBodyLimits {
  /** Most items in `requests` (50,000). */
  maxItems: number;
  /** Largest single item or other member, bytes (the JSON body limit of one request). */
  maxMemberBytes: number;
}

const { QUOTE, BACKSLASH, OPEN_BRACKET, CLOSE_BRACKET, OPEN_BRACE, CLOSE_BRACE, COMMA, COLON } = JSON_BYTES;
/** Bytes scanned between yields to the event loop. */
const YIELD_EVERY_BYTES = 1024 * 1024;

function malformed(detail: string): AppError {
  return AppError.invalid(`The body is not valid JSON: ${detail}`, [{ field: "body", message: detail }]);
}

function isWhitespace(c: number): boolean {
  return c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
}

/** A cursor over the body bytes with the scanning steps; every step is bounded in bytes. */
class Scanner {
  pos = 0;
  private lastYield = 0;

  constructor(
    readonly buf: Buffer,
    private readonly limits: BatchBodyLimits,
  ) {
    // A UTF-8 byte order mark is allowed before the JSON text.
    if (buf[0] === 0xef && buf[1] === 0xbb && buf[2] === 0xbf) this.pos = 3;
  }

  async maybeYield(): Promise<void> {
    if (this.pos - this.lastYield < YIELD_EVERY_BYTES) return;
    this.lastYield = this.pos;
    await new Promise((resolve) => setImmediate(resolve));
  }

  skipWhitespace(): void {
    while (this.pos < this.buf.length && isWhitespace(this.buf[this.pos])) this.pos++;
  }

  peek(): number | undefined {
    return this.buf[this.pos];
  }

  expect(c: number, what: string): void {
    this.skipWhitespace();
    if (this.buf[this.pos] !== c) {
      throw malformed(`expected ${what} at byte ${this.pos}`);
    }
    this.pos++;
  }

  /** Moves past one JSON value (not validated beyond strings and bracket balance); returns its end. */
  skipValue(field: string): number {
    this.skipWhitespace();
    const start = this.pos;
    const limit = start + this.limits.maxMemberBytes;
    const buf = this.buf;
    const c = buf[this.pos];
    if (c === undefined) throw malformed(`unexpected end of body in ${field}`);
    if (c === QUOTE) {
      this.pos = this.stringEnd(this.pos, limit, field);
      return this.pos;
    }
    if (c === OPEN_BRACE || c === OPEN_BRACKET) {
      let depth = 0;
      let i = this.pos;
      for (; i < buf.length; i++) {
        if (i >= limit) throw tooLarge(field, this.limits.maxMemberBytes);
        const b = buf[i];
        if (b === QUOTE) {
          i = this.stringEnd(i, limit, field) - 1;
        } else if (b === OPEN_BRACE || b === OPEN_BRACKET) {
          depth++;
        } else if (b === CLOSE_BRACE || b === CLOSE_BRACKET) {
          depth--;
          if (depth === 0) break;
        }
      }
      if (i >= buf.length) throw malformed(`unexpected end of body in ${field}`);
      this.pos = i + 1;
      return this.pos;
    }
    // A number, true, false or null: up to the next structural character or whitespace.
    let i = this.pos;
    while (
      i < buf.length &&
      !isWhitespace(buf[i]) &&
      buf[i] !== COMMA &&
      buf[i] !== CLOSE_BRACE &&
      buf[i] !== CLOSE_BRACKET
    ) {
      if (i - start > 1024) throw malformed(`unexpected content in ${field}`);
      i++;
    }
    if (i === start) throw malformed(`expected a value in ${field} at byte ${start}`);
    this.pos = i;
    return i;
  }

  /** The index just past the string starting at `at` (a quote). */
  private stringEnd(at: number, limit: number, field: string): number {
    const buf = this.buf;
    for (let i = at + 1; i < buf.length; i++) {
      if (i >= limit) throw tooLarge(field, this.limits.maxMemberBytes);
      const b = buf[i];
      if (b === BACKSLASH) i++;
      else if (b === QUOTE) return i + 1;
    }
    throw malformed(`unterminated string in ${field}`);
  }

  text(start: number, end: number): string {
    return this.buf.toString("utf8", start, end);
  }
}

function tooLarge(field: string, maxBytes: number): AppError {
  return new AppError(ErrorCode.PayloadTooLarge, `${field} is larger than ${maxBytes} bytes`, {
    field,
    code: "item_too_large",
  });
}

/** Parses one member within the shape bounds of any JSON body. @throws AppError 400 naming it. */
function parseMember(buf: Buffer, start: number, end: number, field: string): unknown {
  const problem = jsonShapeProblem(buf.subarray(start, end), MAX_JSON_DEPTH, MAX_JSON_MEMBERS, MAX_JSON_VALUES);
  if (problem) {
    throw AppError.invalid(`${field} is over a JSON bound (${problem})`, [
      { field, message: `exceeds the ${problem} bound of a JSON body` },
    ]);
  }
  return parseJson(buf.toString("utf8", start, end), field);
}

function parseJson(text: string, field: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw malformed(`${field} is not valid JSON`);
  }
}

/**
 * Scans a batch body: `{"requests": [...], ...other members}`.
 * @throws AppError 400 when the body is not a JSON object or is malformed around the items (each
 *   item's own syntax is judged when it is parsed, by `parseItem`); 413 when `requests` has more
 *   than `maxItems` items or one member is larger than `maxMemberBytes`.
 */
export async function scanBatchBody(buf: Buffer, limits: BatchBodyLimits): Promise<ScannedBatchBody> {
  const s = new Scanner(buf, limits);
  const members: Partial<Record<BatchMember, unknown>> = {};
  let items: ItemSpan[] | null = null;
  let requestsValue: unknown;
  s.expect(OPEN_BRACE, "a JSON object");
  s.skipWhitespace();
  if (s.peek() === CLOSE_BRACE) {
    s.pos++;
  } else {
    for (;;) {
      s.skipWhitespace();
      if (s.peek() !== QUOTE) throw malformed(`expected a member name at byte ${s.pos}`);
      const keyStart = s.pos;
      const keyEnd = s.skipValue("a member name");
      const key = parseJson(s.text(keyStart, keyEnd), "a member name") as string;
      s.expect(COLON, "':'");
      s.skipWhitespace();
      if (key === "requests" && s.peek() === OPEN_BRACKET) {
        // A repeated member: the last one counts, as JSON.parse would have it.
        requestsValue = undefined;
        items = [];
        s.pos++;
        s.skipWhitespace();
        if (s.peek() === CLOSE_BRACKET) {
          s.pos++;
        } else {
          for (;;) {
            const field = `requests[${items.length}]`;
            s.skipWhitespace();
            const start = s.pos;
            const end = s.skipValue(field);
            items.push({ start, end });
            if (items.length > limits.maxItems) {
              throw new AppError(ErrorCode.PayloadTooLarge, `A batch holds at most ${limits.maxItems} requests`, {
                field: "requests",
                code: "too_many_requests",
              });
            }
            await s.maybeYield();
            s.skipWhitespace();
            const next = s.peek();
            if (next === COMMA) {
              s.pos++;
              continue;
            }
            if (next === CLOSE_BRACKET) {
              s.pos++;
              break;
            }
            throw malformed(`expected ',' or ']' after ${field}`);
          }
        }
      } else {
        const start = s.pos;
        const end = s.skipValue(key);
        // Every member is bounded like any JSON body before it is parsed, and parsed (the body
        // must be JSON), but only the known ones are kept (never `__proto__` and the like).
        const value = parseMember(buf, start, end, key);
        if (key === "requests") {
          items = null;
          requestsValue = value;
        } else if ((BATCH_MEMBERS as readonly string[]).includes(key)) {
          members[key as BatchMember] = value;
        }
        await s.maybeYield();
      }
      s.skipWhitespace();
      const next = s.peek();
      if (next === COMMA) {
        s.pos++;
        continue;
      }
      if (next === CLOSE_BRACE) {
        s.pos++;
        break;
      }
      throw malformed(`expected ',' or '}' at byte ${s.pos}`);
    }
  }
  s.skipWhitespace();
  if (s.pos !== buf.length) throw malformed(`unexpected content after the object at byte ${s.pos}`);
  return { members, items, ...(requestsValue !== undefined ? { requestsValue } : {}) };
}

/**
 * Parses one item of a scanned body, within the shape bounds of any JSON body (`shared/json-shape`).
 * @returns the parsed value, or an issue message when it is not valid JSON or breaks a bound.
 */
export function parseItem(buf: Buffer, span: ItemSpan): { value?: unknown; error?: string } {
  const bytes = buf.subarray(span.start, span.end);
  const problem = jsonShapeProblem(bytes, MAX_JSON_DEPTH, MAX_JSON_MEMBERS, MAX_JSON_VALUES);
  if (problem === "depth") return { error: `is nested deeper than ${MAX_JSON_DEPTH} levels` };
  if (problem)
    return { error: `has more than ${problem === "members" ? MAX_JSON_MEMBERS : MAX_JSON_VALUES} ${problem}` };
  try {
    return { value: JSON.parse(buf.toString("utf8", span.start, span.end)) };
  } catch {
    return { error: "is not valid JSON" };
  }
}
