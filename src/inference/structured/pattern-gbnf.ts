/**
 * A JSON Schema `pattern` (an ECMA-262 regular expression, read with the `u` flag as ajv does) →
 * a GBNF expression for the JSON string body of the values it matches (issue 26, item 1: OpenAI's
 * strict mode accepts `pattern`, and zod's `.email()`, `.datetime()`, `.regex()` write one). The
 * approach follows llama.cpp's `_visit_pattern` (common/json-schema-to-grammar.cpp): the regex is
 * parsed into sequences, alternatives, character sets and repetitions, each written as GBNF.
 *
 * The subset: literals and escapes (`\n`, `\t`, `\xHH`, `\uHHHH`, `\u{…}`, escaped syntax
 * characters), `.`, classes `[a-z0-9_]` and negated classes, `\d \w \s` and `\D \W \S`, groups
 * `( )`, `(?: )` and `(?<name> )`, alternation `|`, quantifiers `* + ? {n} {n,} {n,m}` (lazy or
 * not, counts up to 100), and `^` / `$` at the start / end of a top-level alternative. A side
 * without its anchor allows up to 32 characters of any text there (a JSON Schema pattern is
 * unanchored). Anything else (lookarounds, backreferences, `\b`, `\p{…}`, anchors elsewhere, a
 * repeated part that can match nothing) is refused with a message; the caller reports it as a
 * `pattern` issue.
 *
 * Characters are written as JSON wants them: `"` and `\` as `\"` and `\\`; control characters as
 * JSON escapes, and only where a set holds nothing printable (the grammar may allow less than the
 * regex, never more).
 */

type Ranges = [number, number][];
type Node =
  | { kind: "set"; ranges: Ranges }
  | { kind: "seq"; items: Node[] }
  | { kind: "alt"; branches: Node[] }
  | { kind: "repeat"; body: Node; min: number; max: number | undefined }
  | { kind: "anchor"; which: "^" | "$" };

const MAX_CP = 0x10ffff;
const MAX_COUNT = 100;
/** Code points a JSON string may hold as they are (not `"`, `\`, controls, DEL or surrogates). */
const RAW: Ranges = [
  [0x20, 0x21],
  [0x23, 0x5b],
  [0x5d, 0x7e],
  [0x80, 0xd7ff],
  [0xe000, MAX_CP],
];
const DIGIT: Ranges = [[0x30, 0x39]];
const WORD: Ranges = [
  [0x30, 0x39],
  [0x41, 0x5a],
  [0x5f, 0x5f],
  [0x61, 0x7a],
];
const SPACE: Ranges = [
  [0x09, 0x0d],
  [0x20, 0x20],
  [0xa0, 0xa0],
  [0x1680, 0x1680],
  [0x2000, 0x200a],
  [0x2028, 0x2029],
  [0x202f, 0x202f],
  [0x205f, 0x205f],
  [0x3000, 0x3000],
  [0xfeff, 0xfeff],
];
/** `.` with the `u` flag: any code point but the line terminators. */
const DOT = complement([
  [0x0a, 0x0a],
  [0x0d, 0x0d],
  [0x2028, 0x2029],
]);
const JSON_ESCAPES: Record<number, string> = { 0x08: "\\b", 0x09: "\\t", 0x0a: "\\n", 0x0c: "\\f", 0x0d: "\\r" };

function normalize(ranges: Ranges): Ranges {
  const sorted = [...ranges].sort((a, b) => a[0] - b[0]);
  const out: Ranges = [];
  for (const [lo, hi] of sorted) {
    const last = out[out.length - 1];
    if (last && lo <= last[1] + 1) last[1] = Math.max(last[1], hi);
    else out.push([lo, hi]);
  }
  return out;
}

function complement(ranges: Ranges): Ranges {
  const out: Ranges = [];
  let next = 0;
  for (const [lo, hi] of normalize(ranges)) {
    if (lo > next) out.push([next, lo - 1]);
    next = hi + 1;
  }
  if (next <= MAX_CP) out.push([next, MAX_CP]);
  return out;
}

function intersect(a: Ranges, b: Ranges): Ranges {
  const out: Ranges = [];
  for (const [alo, ahi] of normalize(a))
    for (const [blo, bhi] of b) {
      const lo = Math.max(alo, blo);
      const hi = Math.min(ahi, bhi);
      if (lo <= hi) out.push([lo, hi]);
    }
  return out;
}

const has = (ranges: Ranges, cp: number) => ranges.some(([lo, hi]) => lo <= cp && cp <= hi);

/** A code point as GBNF writes it inside a literal or a class. */
function gbnfChar(cp: number, inClass: boolean): string {
  // llama.cpp's grammar parser knows only the escapes \x \u \U \t \r \n \\ \" \[ \]: `-` and `^` by number.
  if (cp < 0x20 || cp >= 0x7f || (inClass && (cp === 0x2d || cp === 0x5e))) {
    const hex = cp.toString(16).toUpperCase();
    return cp <= 0xff
      ? `\\x${hex.padStart(2, "0")}`
      : cp <= 0xffff
        ? `\\u${hex.padStart(4, "0")}`
        : `\\U${hex.padStart(8, "0")}`;
  }
  const c = String.fromCodePoint(cp);
  if (c === "\\" || c === '"' || (inClass && (c === "]" || c === "["))) return `\\${c}`;
  return c;
}

function lit(text: string): string {
  return `"${Array.from(text, (c) => gbnfChar(c.codePointAt(0)!, false)).join("")}"`;
}

/** The JSON text of one code point that must be escaped in a JSON string. */
function jsonEscape(cp: number): string {
  return JSON_ESCAPES[cp] ?? `\\u${cp.toString(16).padStart(4, "0")}`;
}

/** GBNF for one character of a set, as it stands in a JSON string; null if the set allows none. */
function renderSet(ranges: Ranges): string | null {
  const raw = intersect(ranges, RAW);
  const alts: string[] = [];
  if (raw.length === 1 && raw[0][0] === raw[0][1]) alts.push(lit(String.fromCodePoint(raw[0][0])));
  else if (raw.length > 0)
    alts.push(
      `[${raw.map(([lo, hi]) => (lo === hi ? gbnfChar(lo, true) : `${gbnfChar(lo, true)}-${gbnfChar(hi, true)}`)).join("")}]`,
    );
  if (has(ranges, 0x22)) alts.push(lit('\\"'));
  if (has(ranges, 0x5c)) alts.push(lit("\\\\"));
  if (alts.length === 0) {
    // Nothing printable: the control characters (and DEL) the set holds, as JSON escapes.
    for (const [lo, hi] of intersect(ranges, [
      [0, 0x1f],
      [0x7f, 0x7f],
    ]))
      for (let cp = lo; cp <= hi; cp++) alts.push(lit(jsonEscape(cp)));
  }
  if (alts.length === 0) return null;
  return alts.length === 1 ? alts[0] : `( ${alts.join(" | ")} )`;
}

class PatternError extends Error {}

class Parser {
  private pos = 0;
  private readonly cps: string[];
  constructor(pattern: string) {
    this.cps = Array.from(pattern);
  }

  parse(): Node {
    const node = this.alternation();
    if (this.pos < this.cps.length) throw new PatternError(`unexpected '${this.cps[this.pos]}'`);
    return node;
  }

  private peek(offset = 0): string | undefined {
    return this.cps[this.pos + offset];
  }

  private alternation(): Node {
    const branches = [this.sequence()];
    while (this.peek() === "|") {
      this.pos++;
      branches.push(this.sequence());
    }
    return branches.length === 1 ? branches[0] : { kind: "alt", branches };
  }

  private sequence(): Node {
    const items: Node[] = [];
    while (this.pos < this.cps.length && this.peek() !== "|" && this.peek() !== ")") {
      const atom = this.atom();
      items.push(this.quantified(atom));
    }
    return { kind: "seq", items };
  }

  private quantified(atom: Node): Node {
    const c = this.peek();
    let min: number;
    let max: number | undefined;
    if (c === "*") [min, max] = [0, undefined];
    else if (c === "+") [min, max] = [1, undefined];
    else if (c === "?") [min, max] = [0, 1];
    else if (c === "{") {
      const m = /^\{(\d+)(,(\d*))?\}/.exec(this.cps.slice(this.pos).join(""));
      if (!m) throw new PatternError("a malformed {n,m} quantifier");
      min = Number(m[1]);
      max = m[2] === undefined ? min : m[3] === "" ? undefined : Number(m[3]);
      this.pos += m[0].length - 1;
    } else return atom;
    this.pos++;
    if (this.peek() === "?") this.pos++; // lazy: the same strings
    if (atom.kind === "anchor") throw new PatternError("a quantified anchor");
    if (min > MAX_COUNT || (max ?? 0) > MAX_COUNT) throw new PatternError(`a count above ${MAX_COUNT}`);
    if (max === undefined && nullable(atom)) throw new PatternError("a repeated part that can match nothing");
    return { kind: "repeat", body: atom, min, max };
  }

  private atom(): Node {
    const c = this.cps[this.pos++];
    switch (c) {
      case "^":
      case "$":
        return { kind: "anchor", which: c };
      case ".":
        return { kind: "set", ranges: DOT };
      case "[":
        return this.charClass();
      case "(":
        return this.group();
      case "\\":
        return { kind: "set", ranges: this.escape(false) };
      case "*":
      case "+":
      case "?":
      case "{":
      case "}":
      case "]":
      case ")":
        throw new PatternError(`unexpected '${c}'`);
      default:
        return single(c.codePointAt(0)!);
    }
  }

  private group(): Node {
    if (this.peek() === "?") {
      const rest = this.cps.slice(this.pos, this.pos + 3).join("");
      if (rest.startsWith("?:")) this.pos += 2;
      else if (rest.startsWith("?<") && rest !== "?<=" && rest !== "?<!") {
        const end = this.cps.indexOf(">", this.pos);
        if (end < 0) throw new PatternError("a malformed group name");
        this.pos = end + 1;
      } else throw new PatternError("lookarounds are not enforced while decoding");
    }
    const body = this.alternation();
    if (this.cps[this.pos++] !== ")") throw new PatternError("an unclosed group");
    return body.kind === "seq" ? body : { kind: "seq", items: [body] };
  }

  private charClass(): Node {
    const negated = this.peek() === "^";
    if (negated) this.pos++;
    const ranges: Ranges = [];
    while (this.peek() !== "]") {
      if (this.pos >= this.cps.length) throw new PatternError("an unclosed class");
      const lo = this.classAtom();
      if (this.peek() === "-" && this.peek(1) !== "]" && this.peek(1) !== undefined) {
        this.pos++;
        const hi = this.classAtom();
        if (lo.length !== 1 || hi.length !== 1 || lo[0][0] !== lo[0][1] || hi[0][0] !== hi[0][1])
          throw new PatternError("a range between classes");
        if (hi[0][0] < lo[0][0]) throw new PatternError("a range out of order");
        ranges.push([lo[0][0], hi[0][0]]);
      } else ranges.push(...lo);
    }
    this.pos++;
    return { kind: "set", ranges: negated ? complement(ranges) : normalize(ranges) };
  }

  private classAtom(): Ranges {
    const c = this.cps[this.pos++];
    if (c === "\\") return this.escape(true);
    const cp = c.codePointAt(0)!;
    return [[cp, cp]];
  }

  /** The set of an escape (the backslash read); `inClass`: `\b` is a backspace there. */
  private escape(inClass: boolean): Ranges {
    const c = this.cps[this.pos++];
    const one = (cp: number): Ranges => [[cp, cp]];
    switch (c) {
      case "d":
        return DIGIT;
      case "D":
        return complement(DIGIT);
      case "w":
        return WORD;
      case "W":
        return complement(WORD);
      case "s":
        return SPACE;
      case "S":
        return complement(SPACE);
      case "n":
        return one(0x0a);
      case "r":
        return one(0x0d);
      case "t":
        return one(0x09);
      case "f":
        return one(0x0c);
      case "v":
        return one(0x0b);
      case "0":
        return one(0);
      case "x":
      case "u": {
        const text = this.cps.slice(this.pos).join("");
        const m = c === "x" ? /^[0-9a-fA-F]{2}/.exec(text) : /^(?:[0-9a-fA-F]{4}|\{[0-9a-fA-F]{1,6}\})/.exec(text);
        if (!m) throw new PatternError(`a malformed \\${c} escape`);
        this.pos += m[0].length;
        return one(parseInt(m[0].replace(/[{}]/g, ""), 16));
      }
      case "b":
        if (inClass) return one(0x08);
        break;
      default:
        if (c !== undefined && /[\^$\\.*+?()[\]{}|/-]/.test(c)) return one(c.codePointAt(0)!);
    }
    throw new PatternError(`the escape \\${c ?? ""} is not enforced while decoding`);
  }
}

function single(cp: number): Node {
  return { kind: "set", ranges: [[cp, cp]] };
}

function nullable(node: Node): boolean {
  switch (node.kind) {
    case "set":
      return false;
    case "anchor":
      return true;
    case "seq":
      return node.items.every(nullable);
    case "alt":
      return node.branches.some(nullable);
    case "repeat":
      return node.min === 0 || nullable(node.body);
  }
}

/** Makes a named rule of a GBNF body and returns its name. */
type RuleMaker = (body: string) => string;

/**
 * GBNF of a node. A counted repetition (`{n,m}`) is written out on a named rule (`part part (
 * part )?`), so the grammar holds each repeated part once.
 */
function render(node: Node, rule: RuleMaker): string {
  switch (node.kind) {
    case "set": {
      const out = renderSet(node.ranges);
      if (out === null) throw new PatternError("a character class that allows nothing");
      return out;
    }
    case "anchor":
      throw new PatternError(`'${node.which}' only at the start or the end of the pattern is enforced`);
    case "seq": {
      const parts = node.items.map((n) => render(n, rule));
      return parts.length === 0 ? '""' : parts.length === 1 ? parts[0] : `( ${parts.join(" ")} )`;
    }
    case "alt":
      return `( ${node.branches.map((n) => render(n, rule)).join(" | ")} )`;
    case "repeat": {
      const body = render(node.body, rule);
      const { min, max } = node;
      if (max === undefined)
        return min === 0 ? `${body}*` : min === 1 ? `${body}+` : `${repeat(rule(body), min)} ${rule(body)}*`;
      if (min === 0 && max === 1) return `${body}?`;
      // Counted: written out, the optional tail nested (see above).
      const name = rule(body);
      let tail = "";
      for (let i = min; i < max; i++) tail = `( ${name}${tail ? ` ${tail}` : ""} )?`;
      return [repeat(name, min), tail].filter(Boolean).join(" ") || '""';
    }
  }
}

function repeat(name: string, n: number): string {
  return Array.from({ length: n }, () => name).join(" ");
}

/**
 * Any text where a pattern has no anchor: up to 32 characters (fewer than the regex allows, so
 * the string still ends; any text there matches).
 */
const FREE_MAX = 32;
const FREE = `char{0,${FREE_MAX}}`;

/** One top-level alternative: its anchors taken off, `FREE` where an anchor is missing. */
function renderBranch(branch: Node, rule: RuleMaker): string {
  const items = branch.kind === "seq" ? [...branch.items] : [branch];
  const first = items[0];
  const anchoredStart = first?.kind === "anchor" && first.which === "^";
  if (anchoredStart) items.shift();
  const last = items[items.length - 1];
  const anchoredEnd = last?.kind === "anchor" && last.which === "$";
  if (anchoredEnd) items.pop();
  return [anchoredStart ? "" : FREE, render({ kind: "seq", items }, rule), anchoredEnd ? "" : FREE]
    .filter(Boolean)
    .join(" ");
}

/** Length bounds of a string, in code points (JSON Schema's `minLength` / `maxLength`). */
export interface LengthBounds {
  min: number;
  max?: number;
}

/** The fewest and most code points a node matches (`Infinity` when unbounded). */
function lengthRange(node: Node): [number, number] {
  switch (node.kind) {
    case "set":
      return [1, 1];
    case "anchor":
      return [0, 0];
    case "seq":
      return node.items.map(lengthRange).reduce(([a, b], [c, d]) => [a + c, b + d], [0, 0]);
    case "alt": {
      const ranges = node.branches.map(lengthRange);
      return [Math.min(...ranges.map((r) => r[0])), Math.max(...ranges.map((r) => r[1]))];
    }
    case "repeat": {
      const [lo, hi] = lengthRange(node.body);
      return [node.min * lo, node.max === undefined ? (hi > 0 ? Infinity : 0) : node.max * hi];
    }
  }
}

/**
 * One top-level alternative kept to `bounds`, or null when none of its strings is within them.
 * Kept as it is when every string it matches is within them; an anchored alternative with one
 * part of variable length, a repetition of a fixed-length part (`^\d{3}-[a-z]+$`), gets that
 * repetition's counts narrowed. Anything else is refused (the grammar cannot count characters
 * across parts).
 * @throws PatternError naming the length bounds.
 */
function keepLength(branch: Node, bounds: LengthBounds): Node | null {
  const max = bounds.max ?? Infinity;
  const items = branch.kind === "seq" ? branch.items : [branch];
  const first = items[0];
  const last = items[items.length - 1];
  const atStart = first?.kind === "anchor" && first.which === "^";
  const atEnd = items.length > (atStart ? 1 : 0) && last?.kind === "anchor" && last.which === "$";
  const anchored = atStart && atEnd;
  const [lo, hi] = lengthRange(branch);
  // An unanchored side adds up to FREE_MAX characters of any text.
  const freeHi = (atStart ? 0 : FREE_MAX) + (atEnd ? 0 : FREE_MAX);
  if (lo >= bounds.min && hi + freeHi <= max) return branch;
  if (lo > max || hi + freeHi < bounds.min) return null;
  const refuse = () => {
    throw new PatternError(
      "minLength / maxLength are enforced with a pattern only when every string it matches is within them, " +
        "or when it is anchored (^…$) and one repeated part of fixed length makes its length vary",
    );
  };
  if (!anchored) return refuse();
  const variable = items.filter((n) => {
    const [a, b] = lengthRange(n);
    return a !== b;
  });
  if (variable.length !== 1 || variable[0].kind !== "repeat") return refuse();
  const part = variable[0];
  const [bodyLo, bodyHi] = lengthRange(part.body);
  if (bodyLo !== bodyHi || bodyLo === 0) return refuse();
  const fixed = lo - part.min * bodyLo; // the other parts' length
  const from = Math.max(part.min, Math.ceil((bounds.min - fixed) / bodyLo));
  const to = Math.min(part.max ?? Infinity, Math.floor((max - fixed) / bodyLo));
  if (from > to) return null;
  if (to !== Infinity && to > MAX_COUNT) return refuse();
  const narrowed: Node = { kind: "repeat", body: part.body, min: from, max: to === Infinity ? undefined : to };
  return { kind: "seq", items: items.map((n) => (n === part ? narrowed : n)) };
}

/**
 * GBNF (an expression, using the fixed rule `char`: one JSON string character) for the body of a
 * JSON string whose value `pattern` matches (and, with `lengths`, whose length is within them,
 * see `keepLength`), quotes not included; or the reason it is not enforced. `rule` makes a named
 * rule (the caller's naming) for the parts a counted repetition repeats.
 */
export function patternGrammar(
  pattern: string,
  rule: RuleMaker,
  lengths?: LengthBounds,
): { gbnf: string } | { error: string } {
  try {
    new RegExp(pattern, "u");
  } catch {
    return { error: "is not a valid regular expression" };
  }
  try {
    const tree = new Parser(pattern).parse();
    let branches = tree.kind === "alt" ? tree.branches : [tree];
    if (lengths) {
      branches = branches.map((b) => keepLength(b, lengths)).filter((b): b is Node => b !== null);
      if (branches.length === 0) return { error: "no string it matches is within minLength / maxLength" };
    }
    const alts = branches.map((b) => renderBranch(b, rule));
    return { gbnf: alts.length === 1 ? alts[0] : `( ${alts.join(" | ")} )` };
  } catch (err) {
    if (err instanceof PatternError) return { error: err.message };
    throw err;
  }
}

/**
 * zod 4's own patterns for the formats the compiler writes a fixed rule for (`z.email()`,
 * `z.iso.datetime()`, `z.iso.date()`, `z.uuid()`, `z.ipv4()` put both `format` and `pattern` on
 * the schema). Every string the format's rule writes matches these, so the rule enforces both;
 * a format with any other pattern is enforced through the pattern alone (the format is an issue).
 */
export const FORMAT_PATTERNS: Record<string, string[]> = {
  email: [
    "^(?:[A-Za-z0-9_'+\\-]+\\.)*[A-Za-z0-9_'+\\-]*[A-Za-z0-9_+-]@(?:[A-Za-z0-9][A-Za-z0-9\\-]*\\.)+[A-Za-z]{2,}$",
  ],
  "date-time": [
    "^(?:(?:\\d\\d[2468][048]|\\d\\d[13579][26]|\\d\\d0[48]|[02468][048]00|[13579][26]00)-02-29|\\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)|(?:02)-(?:0[1-9]|1\\d|2[0-8])))T(?:(?:[01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(?:\\.\\d+)?(?:Z))$",
  ],
  date: [
    "^(?:(?:\\d\\d[2468][048]|\\d\\d[13579][26]|\\d\\d0[48]|[02468][048]00|[13579][26]00)-02-29|\\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)|(?:02)-(?:0[1-9]|1\\d|2[0-8])))$",
  ],
  uuid: [
    "^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}|00000000-0000-0000-0000-000000000000|ffffffff-ffff-ffff-ffff-ffffffffffff)$",
  ],
  ipv4: [
    "^(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])\\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])$",
  ],
};
