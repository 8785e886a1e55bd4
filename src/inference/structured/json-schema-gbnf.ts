/**
 * JSON Schema → GBNF (llama.cpp's grammar format), so the embedded engine constrains its output
 * while it decodes (issue 26, item 1): every answer that ends with `stop` parses and validates
 * against the schema, even from a tiny model. Our own generator rather than node-llama-cpp's
 * `createGrammarForJsonSchema`, which requires every property, has no numeric bounds, no
 * `anyOf`, and few formats; the official clients' schemas (`zodResponseFormat`: `anyOf` with
 * `null`, ±9007199254740991 bounds on every `.int()`, `$defs`/`$ref`) need all three.
 *
 * The enforced subset (README "Structured outputs" says the same):
 * - `type` (one or a list), `enum`, `const`, `anyOf`, `oneOf` whose alternatives cannot both
 *   match (`one-of.ts`; each alternative allowed, the model's pick is one of them), `$ref` to `#`, `#/$defs/…` or `#/definitions/…` (recursion too);
 * - objects: `properties` in their order, `required` (the others may be left out),
 *   `additionalProperties` `false`, or a schema / `true` for an object without `properties`;
 * - arrays: `items`, `prefixItems` (then `items`, or nothing for `items: false`), `minItems`, `maxItems`;
 * - strings: `minLength`, `maxLength`, `format` `date`, `time`, `date-time`, `uuid`, `email`, `ipv4`,
 *   `pattern` (a regular-expression subset, `pattern-gbnf.ts`; with one of those formats only
 *   zod's own pattern of it, else the pattern alone is enforced and `format` is an issue; length
 *   bounds beside a pattern when implied or narrowing its one repeated part, beside a format when
 *   its rule keeps within them, `FORMAT_LENGTHS`);
 * - integers: `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum` (exact, as digit
 *   ranges); numbers: the same bounds, integers or decimals of ≤ 15 significant digits
 *   (`number-gbnf.ts`). Unbounded
 *   integers and the integer part of numbers have at most 15 digits, so no answer breaks the
 *   ±2^53 bounds `zodResponseFormat` puts on every `.int()` (and JavaScript reads every answer
 *   exactly);
 * - annotations (`title`, `description`, `default`, `examples`, `$schema`, `$id`, `$comment`,
 *   `deprecated`, `readOnly`, `writeOnly`) are ignored.
 * Anything else (patterns outside the subset, other formats, `multipleOf`, `uniqueItems`,
 * number bounds of more than 15 significant digits, overlapping `oneOf`, `allOf`, `not`, conditionals, `patternProperties`, `minProperties`…)
 * is listed as an issue; the caller refuses the request under `strict: true` and otherwise decodes
 * without that keyword.
 * A `$ref` that comes back to itself before any value is read (`a → b → a`, `{anyOf: [{$ref:
 * "#"}, …]}`) is a fatal issue: refused whatever `strict` says (review finding F3).
 */

import { MAX_DIGITS, MAX_SAFE, type NumberBound, boundedNumber, decimalBound, digitRange } from "./number-gbnf.js";
import { FORMAT_PATTERNS, patternGrammar } from "./pattern-gbnf.js";
import { oneOfOverlap } from "./one-of.js";
import { escapePointer, refLoopsWithoutInput, resolvePointer } from "./schema-refs.js";

export { digitRange } from "./number-gbnf.js";

/**
 * A keyword the grammar cannot enforce, with where it stands (a JSON pointer into the schema).
 * `fatal`: no grammar of this schema can be decoded at all (a `$ref` cycle that reads no input,
 * review finding F3), so it is refused whatever `strict` says.
 */
export interface SchemaIssue {
  path: string;
  keyword: string;
  message: string;
  fatal?: boolean;
}

/**
 * Where an issue stands, as a request field: the field holding the schema and the issue's JSON
 * pointer in dotted form (`tools[0].function.parameters` + `/properties/a~1b/pattern` →
 * `tools[0].function.parameters.properties.a/b.pattern`), as 400s name it.
 */
export function schemaIssueField(field: string, pointer: string): string {
  return (
    field +
    pointer
      .split("/")
      .slice(1)
      .map((p) => "." + p.replace(/~1/g, "/").replace(/~0/g, "~"))
      .join("")
  );
}

/** The grammar (root rule `root`) and what it leaves unenforced. */
export interface SchemaGrammar {
  gbnf: string;
  issues: SchemaIssue[];
}

const ANNOTATIONS = new Set([
  "title",
  "description",
  "default",
  "examples",
  "$schema",
  "$id",
  "$comment",
  "deprecated",
  "readOnly",
  "writeOnly",
  "$defs",
  "definitions",
  "nullable",
]);

/** Keywords handled per type (anything else on a schema of that type is an issue). */
const HANDLED: Record<string, Set<string>> = {
  common: new Set(["type", "enum", "const", "anyOf", "oneOf", "$ref"]),
  object: new Set(["properties", "required", "additionalProperties"]),
  array: new Set(["items", "prefixItems", "minItems", "maxItems"]),
  string: new Set(["minLength", "maxLength", "format", "pattern"]),
  integer: new Set(["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"]),
  number: new Set(["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"]),
};

const FORMATS: Record<string, string> = {
  date: "date",
  time: "time",
  "date-time": "date-time",
  uuid: "uuid",
  email: "email",
  ipv4: "ipv4",
};

/**
 * The fewest and most characters each format's rule writes (for `minLength` / `maxLength` next to
 * a format: bounds around these are enforced by the rule itself). The email rule keeps to 204,
 * under RFC 5321's 254, so zod's `.email().max(254)` (or 255, 320) is enforced as it comes.
 */
const FORMAT_LENGTHS: Record<string, [number, number]> = {
  date: [10, 10],
  time: [9, 16],
  "date-time": [20, 27],
  uuid: [36, 36],
  email: [6, 204],
  ipv4: [7, 15],
};

/** The fixed rules every grammar may use. */
const PRIMITIVES: Record<string, string> = {
  ws: `| " " | "\\n" [ \\t]{0,20}`,
  char: `[^"\\\\\\x7F\\x00-\\x1F] | "\\\\" (["\\\\/bfnrt] | "u" [0-9a-fA-F]{4})`,
  string: `"\\"" char* "\\""`,
  digits: `[0-9]{1,${MAX_DIGITS}}`,
  int: `"-"? ("0" | [1-9] [0-9]{0,${MAX_DIGITS - 1}})`,
  frac: `"." [0-9]{1,${MAX_DIGITS}}`,
  number: `int frac? ([eE] [-+]? [0-9]{1,2})?`,
  boolean: `"true" | "false"`,
  null: `"null"`,
  value: `object | array | string | number | boolean | null`,
  object: `"{" ws ( string ws ":" ws value ( ws "," ws string ws ":" ws value )* )? ws "}"`,
  array: `"[" ws ( value ( ws "," ws value )* )? ws "]"`,
  d2: `[0-9] [0-9]`,
  month: `"0" [1-9] | "1" [0-2]`,
  // Days 01–28 are valid in every month: no calendar in the grammar, and no invalid date out of it.
  day: `"0" [1-9] | "1" [0-9] | "2" [0-8]`,
  hour: `[01] [0-9] | "2" [0-3]`,
  minsec: `[0-5] [0-9]`,
  "date-body": `[12] [0-9] [0-9] [0-9] "-" month "-" day`,
  "time-body": `hour ":" minsec ":" minsec ("." [0-9]{1,6})? "Z"`,
  date: `"\\"" date-body "\\""`,
  time: `"\\"" time-body "\\""`,
  "date-time": `"\\"" date-body "T" time-body "\\""`,
  hex: `[0-9a-f]`,
  uuid: `"\\"" hex{8} "-" hex{4} "-" [1-8] hex{3} "-" [89ab] hex{3} "-" hex{12} "\\""`,
  "email-part": `[a-z0-9] ([a-z0-9_+-]{0,30} [a-z0-9])?`,
  // Domain labels of letters, digits and inner dashes: within zod's own email pattern too.
  "domain-part": `[a-z0-9] ([a-z0-9-]{0,30} [a-z0-9])?`,
  email: `"\\"" email-part ("." email-part){0,2} "@" domain-part ("." domain-part){0,2} "." [a-z]{2,6} "\\""`,
  octet: `[0-9] | [1-9] [0-9] | "1" [0-9] [0-9] | "2" [0-4] [0-9] | "25" [0-5]`,
  ipv4: `"\\"" octet "." octet "." octet "." octet "\\""`,
};

/** Which fixed rules each fixed rule uses (so only what is needed is written out). */
const USES: Record<string, string[]> = {
  string: ["char"],
  number: ["int", "frac"],
  value: ["object", "array", "string", "number", "boolean", "null"],
  object: ["ws", "string", "value"],
  array: ["ws", "value"],
  "date-body": ["month", "day"],
  "time-body": ["hour", "minsec"],
  date: ["date-body"],
  time: ["time-body"],
  "date-time": ["date-body", "time-body"],
  uuid: ["hex"],
  email: ["email-part", "domain-part"],
  ipv4: ["octet"],
};

/** A GBNF string literal of `text`. */
function literal(text: string): string {
  return `"${text.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n").replace(/\r/g, "\\r").replace(/\t/g, "\\t")}"`;
}

/** A JSON value as the GBNF literal of its compact JSON text. */
function jsonLiteral(value: unknown): string {
  return literal(JSON.stringify(value));
}

function seq(a: string, b: string): string {
  return [a, b].filter(Boolean).join(" ");
}

/**
 * Builds the grammar of `schema` (an answer is one JSON value that validates against it).
 */
export function jsonSchemaGrammar(schema: unknown): SchemaGrammar {
  return new GrammarBuilder(schema).build();
}

/**
 * One grammar for a choice of texts each followed by a JSON value valid against its own schema:
 * `root ::= lead₀ value₀ | lead₁ value₁ | …` (issue 26, item 2: a forced call in a chat template's
 * syntax, `get_weather", "arguments": {…}`). Each schema's rules get their own name prefix, so
 * `$ref`s resolve within that schema. Keywords the grammar cannot enforce are decoded without
 * (the caller checked strict schemas before).
 */
export function jsonSchemaChoiceGrammar(choices: { lead: string; schema: unknown }[]): string {
  const lines = new Set<string>();
  const alternatives = choices.map((choice, i) => {
    const prefix = `c${i}-`;
    for (const line of new GrammarBuilder(choice.schema, prefix).build().gbnf.trim().split("\n")) lines.add(line);
    return `${literal(choice.lead)} ${prefix}root`;
  });
  return [`root ::= ${alternatives.join(" | ")}`, ...lines].join("\n") + "\n";
}

/** The grammar of any JSON object (`response_format: {type: "json_object"}`). */
export function jsonObjectGrammar(): string {
  const b = new GrammarBuilder({ type: "object" });
  return b.build().gbnf;
}

class GrammarBuilder {
  private readonly rules = new Map<string, string>();
  private readonly fixed = new Set<string>();
  private readonly issues: SchemaIssue[] = [];
  /** Rule names of `$ref` targets, made once each (recursion refers back to them). */
  private readonly refs = new Map<string, string>();
  private counter = 0;

  /** @param prefix put before every rule name but the fixed ones (`jsonSchemaChoiceGrammar`). */
  constructor(
    private readonly root: unknown,
    private readonly prefix = "",
  ) {}

  build(): SchemaGrammar {
    const body = this.visit(this.root, "#");
    const rootName = `${this.prefix}root`;
    this.rules.set(rootName, body);
    const lines = [`${rootName} ::= ${body}`];
    for (const [name, rule] of this.rules) if (name !== rootName) lines.push(`${name} ::= ${rule}`);
    for (const name of this.fixedClosure()) lines.push(`${name} ::= ${PRIMITIVES[name]}`);
    return { gbnf: lines.join("\n") + "\n", issues: this.issues };
  }

  private fixedClosure(): string[] {
    const out = new Set<string>();
    const add = (n: string) => {
      if (out.has(n)) return;
      out.add(n);
      for (const u of USES[n] ?? []) add(u);
    };
    for (const n of this.fixed) add(n);
    return [...out].sort();
  }

  private use(name: string): string {
    this.fixed.add(name);
    return name;
  }

  private issue(path: string, keyword: string, message: string): void {
    this.issues.push({ path, keyword, message });
  }

  /** A new rule holding `body`; returns its name. */
  private rule(hint: string, body: string): string {
    const name = `${this.prefix}${
      hint
        .replace(/[^a-zA-Z0-9-]/g, "-")
        .replace(/-+/g, "-")
        .slice(0, 40) || "r"
    }-${this.counter++}`;
    this.rules.set(name, body);
    return name;
  }

  /** GBNF (an expression) for one schema at `path`. */
  private visit(schema: unknown, path: string): string {
    if (schema === true || (isObject(schema) && Object.keys(schema).every((k) => ANNOTATIONS.has(k)))) {
      return this.use("value");
    }
    if (schema === false) {
      this.issue(path, "false", "a schema that allows nothing cannot be answered");
      return this.use("value");
    }
    if (!isObject(schema)) {
      this.issue(path, "schema", "must be an object or a boolean");
      return this.use("value");
    }
    if (typeof schema.$ref === "string") {
      this.checkKeywords(schema, path, new Set(["$ref"]));
      return this.ref(schema.$ref, path);
    }
    if ("const" in schema) {
      this.checkKeywords(schema, path, new Set(["const", "type"]));
      return jsonLiteral(schema.const);
    }
    if (Array.isArray(schema.enum)) {
      this.checkKeywords(schema, path, new Set(["enum", "type"]));
      if (schema.enum.length === 0) this.issue(path, "enum", "an empty enum allows nothing");
      return group(schema.enum.map(jsonLiteral));
    }
    const alternatives = Array.isArray(schema.anyOf) ? "anyOf" : Array.isArray(schema.oneOf) ? "oneOf" : null;
    if (alternatives) {
      this.checkKeywords(schema, path, new Set([alternatives]));
      const list = schema[alternatives] as unknown[];
      const overlap = alternatives === "oneOf" ? oneOfOverlap(this.root, list) : undefined;
      if (overlap) this.issue(`${path}/oneOf`, "oneOf", overlap);
      return group(list.map((s, i) => this.visit(s, `${path}/${alternatives}/${i}`)));
    }
    const types = typeof schema.type === "string" ? [schema.type] : Array.isArray(schema.type) ? schema.type : null;
    if (!types) {
      this.checkKeywords(schema, path, new Set());
      return this.use("value");
    }
    const handled = new Set([...HANDLED.common, ...types.flatMap((t) => [...(HANDLED[String(t)] ?? [])])]);
    this.checkKeywords(schema, path, handled);
    return group(types.map((t) => this.typed(String(t), schema, path)));
  }

  private checkKeywords(schema: Record<string, unknown>, path: string, handled: Set<string>): void {
    for (const key of Object.keys(schema)) {
      if (ANNOTATIONS.has(key) || handled.has(key)) continue;
      this.issue(`${path}/${escapePointer(key)}`, key, `\`${key}\` is not enforced while decoding`);
    }
  }

  private typed(type: string, s: Record<string, unknown>, path: string): string {
    switch (type) {
      case "string":
        return this.string(s, path);
      case "integer":
        return this.integer(s, path);
      case "number":
        return this.number(s, path);
      case "boolean":
        return this.use("boolean");
      case "null":
        return this.use("null");
      case "object":
        return this.object(s, path);
      case "array":
        return this.array(s, path);
      default:
        this.issue(`${path}/type`, "type", `unknown type '${type}'`);
        return this.use("value");
    }
  }

  private string(s: Record<string, unknown>, path: string): string {
    const lengths = s.minLength !== undefined || s.maxLength !== undefined;
    const pattern = typeof s.pattern === "string" ? s.pattern : undefined;
    if (s.pattern !== undefined && pattern === undefined) this.issue(`${path}/pattern`, "pattern", "must be a string");
    if (typeof s.format === "string") {
      const f = FORMATS[s.format];
      if (!f) {
        this.issue(`${path}/format`, "format", `format '${s.format}' is not enforced while decoding`);
      } else if (pattern === undefined || FORMAT_PATTERNS[f]?.includes(pattern)) {
        // zod's own pattern of a format: every string the format's rule writes matches it too.
        const [lo, hi] = FORMAT_LENGTHS[f];
        const min = nonNegativeInt(s.minLength) ?? 0;
        const max = nonNegativeInt(s.maxLength) ?? Infinity;
        if (lengths && (lo < min || hi > max)) {
          const keyword = lo < min ? "minLength" : "maxLength";
          this.issue(
            path,
            keyword,
            `the ${s.format} rule writes ${lo}–${hi} characters; only bounds around that are enforced`,
          );
        }
        return this.use(f);
      } else {
        this.issue(
          `${path}/format`,
          "format",
          "a format together with another pattern is not enforced (the pattern is)",
        );
      }
    }
    if (pattern !== undefined) {
      const makeRule = (body: string) => this.rule(`part-${pathHint(path)}`, body);
      let compiled = patternGrammar(pattern, makeRule);
      if ("error" in compiled) {
        this.issue(`${path}/pattern`, "pattern", `pattern is not enforced while decoding: ${compiled.error}`);
      } else {
        if (lengths) {
          const bounds = { min: nonNegativeInt(s.minLength) ?? 0, max: nonNegativeInt(s.maxLength) };
          const kept = patternGrammar(pattern, makeRule, bounds);
          if ("error" in kept) {
            const keyword = s.maxLength !== undefined ? "maxLength" : "minLength";
            this.issue(`${path}/${keyword}`, keyword, `not enforced together with the pattern: ${kept.error}`);
          } else compiled = kept;
        }
        this.use("char");
        return this.rule(`pattern-${pathHint(path)}`, `"\\"" ${compiled.gbnf} "\\""`);
      }
    }
    const min = nonNegativeInt(s.minLength) ?? 0;
    const max = nonNegativeInt(s.maxLength);
    if (min === 0 && max === undefined) return this.use("string");
    this.use("char");
    if (max !== undefined && max < min) this.issue(path, "maxLength", "maxLength is below minLength");
    return `"\\"" char{${min},${max ?? ""}} "\\""`;
  }

  /** Inclusive integer bounds from the schema's (in)exclusive ones. */
  private integerBounds(s: Record<string, unknown>, path: string): { lo: number; hi: number } {
    let lo = -MAX_SAFE;
    let hi = MAX_SAFE;
    const bound = (key: string, apply: (n: number) => void) => {
      const v = s[key];
      if (v === undefined) return;
      if (typeof v !== "number" || !Number.isFinite(v)) return this.issue(`${path}/${key}`, key, "must be a number");
      apply(v);
    };
    bound("minimum", (v) => (lo = Math.max(lo, Math.ceil(v))));
    bound("exclusiveMinimum", (v) => (lo = Math.max(lo, Math.floor(v) + 1)));
    bound("maximum", (v) => (hi = Math.min(hi, Math.floor(v))));
    bound("exclusiveMaximum", (v) => (hi = Math.min(hi, Math.ceil(v) - 1)));
    if (lo > hi) {
      this.issue(path, "minimum", "no integer is within the bounds");
      return { lo: 0, hi: 0 };
    }
    return { lo, hi };
  }

  private integer(s: Record<string, unknown>, path: string): string {
    const { lo, hi } = this.integerBounds(s, path);
    if (lo === -MAX_SAFE && hi === MAX_SAFE) return this.use("int");
    const alts: string[] = [];
    if (lo < 0) {
      // Negative part: "-" then the magnitudes [max(1, -hi), -lo].
      const from = Math.max(1, -Math.min(hi, -1));
      alts.push(`"-" (${digitRange(from, -lo)})`);
    }
    if (hi >= 0) alts.push(digitRange(Math.max(lo, 0), hi));
    return this.rule(`int-${pathHint(path)}`, alts.join(" | "));
  }

  /** Numbers: bounds of ≤ 15 significant digits are enforced exactly (no exponent then); others are issues. */
  private number(s: Record<string, unknown>, path: string): string {
    const keys = ["minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"].filter((k) => s[k] !== undefined);
    if (keys.length === 0) return this.use("number");
    const why = (k: string) => (typeof s[k] !== "number" ? "it is not a number" : decimalBound(s[k]));
    const bad = keys.filter((k) => why(k) !== undefined);
    for (const k of bad) this.issue(`${path}/${k}`, k, `the bound is not enforced: ${why(k)}`);
    if (bad.length > 0) return this.use("number");
    const pick = (a: NumberBound | undefined, b: NumberBound | undefined, lower: boolean) => {
      if (!a || !b) return a ?? b;
      if (a.value === b.value) return a.exclusive ? a : b;
      return a.value > b.value === lower ? a : b;
    };
    const bound = (k: string, exclusive: boolean) =>
      s[k] === undefined ? undefined : { value: s[k] as number, exclusive };
    const lower = pick(bound("minimum", false), bound("exclusiveMinimum", true), true);
    const upper = pick(bound("maximum", false), bound("exclusiveMaximum", true), false);
    const body = boundedNumber(lower, upper);
    if (body === null) {
      this.issue(path, keys[0], "no number is within the bounds");
      return this.use("number");
    }
    this.use("frac");
    return this.rule(`num-${pathHint(path)}`, body);
  }

  private object(s: Record<string, unknown>, path: string): string {
    const props = isObject(s.properties) ? Object.entries(s.properties) : [];
    const required = new Set(Array.isArray(s.required) ? s.required.map(String) : []);
    const extra = s.additionalProperties;
    this.use("ws");
    if (props.length === 0) {
      if (extra === false) return `"{" ws "}"`;
      if (extra === undefined || extra === true) return this.use("object");
      // A map: string keys, values of one schema.
      const value = this.visit(extra, `${path}/additionalProperties`);
      const kv = this.rule(`kv-${pathHint(path)}`, `${this.use("string")} ws ":" ws ${value}`);
      return `"{" ws ( ${kv} ( ws "," ws ${kv} )* )? ws "}"`;
    }
    if (extra !== undefined && extra !== false) {
      this.issue(
        `${path}/additionalProperties`,
        "additionalProperties",
        "other properties beside `properties` are not generated",
      );
    }
    for (const name of required) {
      if (!props.some(([p]) => p === name)) {
        this.issue(`${path}/required`, "required", `'${name}' is required but not in properties`);
      }
    }
    const kvs = props.map(([name, sub]) => ({
      name,
      required: required.has(name),
      rule: this.rule(
        `kv-${name}`,
        `${literal(JSON.stringify(name))} ws ":" ws ${this.visit(sub, `${path}/properties/${escapePointer(name)}`)}`,
      ),
    }));
    // Properties in their order; each optional one may be left out, and the commas stay right.
    // after[i]: what may follow once a property before i was written (empty past the last).
    const after: string[] = new Array<string>(kvs.length + 1).fill("");
    for (let i = kvs.length - 1; i >= 1; i--) {
      const tail = after[i + 1] ? ` ${after[i + 1]}` : "";
      const own = `ws "," ws ${kvs[i].rule}`;
      after[i] = this.rule(`after-${kvs[i].name}`, kvs[i].required ? `${own}${tail}` : `( ${own} )?${tail}`);
    }
    // The first property written: the first required one, or any optional one before it.
    const starts: string[] = [];
    for (let i = 0; i < kvs.length; i++) {
      starts.push(after[i + 1] ? `${kvs[i].rule} ${after[i + 1]}` : kvs[i].rule);
      if (kvs[i].required) break;
    }
    const body = group(starts);
    return `"{" ws ${kvs.every((k) => !k.required) ? `( ${body} )?` : body} ws "}"`;
  }

  private array(s: Record<string, unknown>, path: string): string {
    this.use("ws");
    const min = nonNegativeInt(s.minItems) ?? 0;
    let max = nonNegativeInt(s.maxItems);
    if (max !== undefined && max < min) this.issue(path, "maxItems", "maxItems is below minItems");
    const tuple = Array.isArray(s.prefixItems)
      ? s.prefixItems.map((sub, i) => this.visit(sub, `${path}/prefixItems/${i}`))
      : [];
    // Past the prefix: `items` (any value when absent), or nothing at all for `items: false`.
    if (s.items === false) {
      max = Math.min(max ?? tuple.length, tuple.length);
      if (min > max) this.issue(`${path}/items`, "items", "minItems asks for more items than prefixItems allows");
    }
    if (max === 0) return `"[" ws "]"`;
    const item =
      s.items === undefined || s.items === true || s.items === false
        ? this.use("value")
        : this.visit(s.items, `${path}/items`);
    const itemRule = this.rule(`item-${pathHint(path)}`, item);
    // rest(i): what may follow once i items are written: the prefix's next item (required below
    // minItems), then the repeated `items` within the bounds (review finding F5).
    const rest = (i: number): string => {
      if (max !== undefined && i >= max) return "";
      if (i >= tuple.length)
        return `( ws "," ws ${itemRule} ){${Math.max(0, min - i)},${max === undefined ? "" : max - i}}`;
      const next = seq(`ws "," ws ${tuple[i]}`, rest(i + 1));
      return i < min ? next : `( ${next} )?`;
    };
    const list = seq(tuple[0] ?? itemRule, rest(1));
    return `"[" ws ${min === 0 ? `( ${list} )?` : list} ws "]"`;
  }

  private ref(ref: string, path: string): string {
    const known = this.refs.get(ref);
    if (known) return known;
    const target = resolvePointer(this.root, ref);
    if (target === undefined) {
      this.issue(`${path}/$ref`, "$ref", `'${ref}' does not name a schema in this document`);
      return this.use("value");
    }
    if (refLoopsWithoutInput(this.root, ref)) {
      // `a → b → a`, or `{anyOf: [{$ref: "#"}, …]}`: left recursion, which no grammar decodes.
      this.issues.push({
        path: `${path}/$ref`,
        keyword: "$ref",
        message: `'${ref}' comes back to itself before any value is read (a cycle without progress)`,
        fatal: true,
      });
      return this.use("value");
    }
    // Named before it is visited, so a recursive reference finds the rule.
    const name = `${this.prefix}ref-${this.counter++}`;
    this.refs.set(ref, name);
    this.rules.set(name, "");
    this.rules.set(name, this.visit(target, ref));
    return name;
  }
}

function group(alts: string[]): string {
  const unique = [...new Set(alts)];
  return unique.length === 1 ? unique[0] : `( ${unique.join(" | ")} )`;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function nonNegativeInt(v: unknown): number | undefined {
  return typeof v === "number" && Number.isInteger(v) && v >= 0 ? v : undefined;
}

function pathHint(path: string): string {
  return path.split("/").slice(-1)[0] || "root";
}
