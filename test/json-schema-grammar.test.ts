/**
 * Structured outputs on the embedded engine (issue 26, item 1): the JSON Schema → GBNF generator
 * (`src/inference/structured/json-schema-gbnf.ts`).
 * - Integer ranges are exact: every number of a range, and none outside it, matches.
 * - A `$ref` cycle that reads no input is a fatal issue; recursion that reads input first is none.
 * - A property test: generated schemas within the documented subset (`$ref` / `$defs` /
 *   `definitions` with recursion that makes progress, `oneOf`, `prefixItems` with item bounds,
 *   string length bounds…) × the tiny model (real llama.cpp decoding under the grammar); every
 *   answer that ends with the model's own stop parses and validates (ajv with ajv-formats), and
 *   every schema with a keyword outside the subset is reported (the engine refuses it under
 *   `strict: true`).
 */
import path from "node:path";
import { Ajv2020 } from "ajv/dist/2020.js";
import addFormatsModule from "ajv-formats";
import fc from "fast-check";
import {
  LlamaCompletion,
  LlamaLogLevel,
  TokenBias,
  getLlama,
  type Llama,
  type LlamaContext,
  type LlamaContextSequence,
  type LlamaModel,
} from "node-llama-cpp";
import { digitRange, jsonSchemaGrammar } from "../src/inference/structured/json-schema-gbnf.js";
import { z } from "zod";
import { MODELS_DIR } from "./support/harness.js";

const addFormats = addFormatsModule as unknown as (ajv: Ajv2020) => Ajv2020;

/** The GBNF of `digitRange` (literals, classes, `{n}`, `|`, groups) as a RegExp. */
function rangeRegex(gbnf: string): RegExp {
  const re = gbnf.replace(/"(-?[0-9]*)"/g, "$1").replace(/\s+/g, "");
  return new RegExp(`^(?:${re})$`);
}

describe("integer ranges", () => {
  test.each([
    [0, 0],
    [0, 9],
    [3, 117],
    [10, 99],
    [1, 1000],
    [47, 3021],
    [999, 1001],
    [0, 1999],
  ])("when the range is [%i, %i], then exactly its numbers match", (lo, hi) => {
    const re = rangeRegex(digitRange(lo, hi));
    for (let n = 0; n <= 4000; n++) expect([n, re.test(String(n))]).toEqual([n, n >= lo && n <= hi]);
    expect(re.test("007")).toBe(false);
  });
});

describe("integer bounds of a schema", () => {
  test.each([
    [{ minimum: -120, maximum: 35 }, -120, 35],
    [{ minimum: -7, maximum: -3 }, -7, -3],
    [{ exclusiveMinimum: -10, exclusiveMaximum: 10 }, -9, 9],
    [{ minimum: 5 }, 5, 3000],
    [{ maximum: -5 }, -3000, -5],
  ])("when an integer has %j, then exactly [%i, %i] matches (within ±3000)", (bounds, lo, hi) => {
    const { gbnf, issues } = jsonSchemaGrammar({ type: "integer", ...bounds });
    expect(issues).toEqual([]);
    const rule = gbnf.split("\n").find((l) => l.startsWith("int-"))!;
    const re = rangeRegex(rule.slice(rule.indexOf("::=") + 3));
    for (let n = -3000; n <= 3000; n++) expect([n, re.test(String(n))]).toEqual([n, n >= lo && n <= hi]);
  });
});

/** The GBNF of a bounded number (literals, classes, repetitions, `frac`) as a RegExp. */
function numberRegex(gbnf: string): RegExp {
  const re = gbnf
    .replace(/"([^"]*)"/g, (_m, text: string) => text.replace(/[.]/g, "\\."))
    .replace(/\bfrac\b/g, "(?:\\.[0-9]{1,15})")
    .replace(/\s+/g, "");
  return new RegExp(`^(?:${re})$`);
}

describe("number bounds of a schema", () => {
  const inside = (b: Partial<Record<string, number>>, v: number) =>
    (b.minimum === undefined || v >= b.minimum) &&
    (b.exclusiveMinimum === undefined || v > b.exclusiveMinimum) &&
    (b.maximum === undefined || v <= b.maximum) &&
    (b.exclusiveMaximum === undefined || v < b.exclusiveMaximum);
  test.each([
    { minimum: 0, maximum: 1 },
    { exclusiveMinimum: 0, exclusiveMaximum: 1 },
    { minimum: -5, exclusiveMaximum: 3 },
    { exclusiveMinimum: -2, maximum: -1 },
    { minimum: 10 },
    { maximum: -3 },
    { exclusiveMaximum: 0 },
    { exclusiveMinimum: 0 },
    { minimum: 7, maximum: 7 },
    { minimum: -1, exclusiveMinimum: -1, maximum: 2, exclusiveMaximum: 3 },
    { maximum: 3.5 },
    { minimum: 0.5 },
    { minimum: 0.5, exclusiveMaximum: 2.75 },
    { exclusiveMinimum: -2.25, maximum: -0.125 },
    { minimum: 1.125, maximum: 1.375 },
    { exclusiveMinimum: 1.125, exclusiveMaximum: 1.375 },
    { minimum: -0.5, maximum: 0.25 },
    { exclusiveMinimum: -19.875, exclusiveMaximum: 19.875 },
    { exclusiveMinimum: 0, exclusiveMaximum: 0.125 },
  ])("when a number has %j, then the numbers within match and no number outside does", (bounds) => {
    const { gbnf, issues } = jsonSchemaGrammar({ type: "number", ...bounds });
    expect(issues).toEqual([]);
    const rule = gbnf.split("\n").find((l) => l.startsWith("num-"))!;
    const re = numberRegex(rule.slice(rule.indexOf("::=") + 3));
    for (let i = -160; i <= 160; i++) {
      const v = i / 8;
      // The shortest text of every value: matched exactly when within the bounds.
      expect([String(v), re.test(String(v))]).toEqual([String(v), inside(bounds, v)]);
      // Other texts of it (trailing zeros, "-0"): never matched outside the bounds.
      for (const text of [v.toFixed(3), `${v}.0`, `-${v}`]) {
        if (re.test(text)) expect([text, inside(bounds, Number(text))]).toEqual([text, true]);
      }
    }
  });

  test.each([
    [{ exclusiveMaximum: 5 }, ["4.99999999999999", "-3"], ["4.999999999999999", "5", "5.0"]],
    [{ exclusiveMaximum: 0.3 }, ["0.29999999999999", "0.2"], ["0.299999999999999999", "0.3", "0.30"]],
    [{ exclusiveMinimum: 2.5 }, ["2.50000000000001", "3"], ["2.5", "2.500000000000000001"]],
    [{ minimum: 1e-7, maximum: 0.001 }, ["0.0000001", "0.00099", "0.001"], ["0.00000009", "0.0010001", "0"]],
  ])(
    "when a number has %j, then texts within 15 significant digits of the bound read back inside it",
    (bounds, yes, no) => {
      const { gbnf, issues } = jsonSchemaGrammar({ type: "number", ...bounds });
      expect(issues).toEqual([]);
      const rule = gbnf.split("\n").find((l) => l.startsWith("num-"))!;
      const re = numberRegex(rule.slice(rule.indexOf("::=") + 3));
      for (const text of yes) expect([text, re.test(text)]).toEqual([text, true]);
      for (const text of no) expect([text, re.test(text)]).toEqual([text, false]);
    },
  );

  test("when a number's bounds are beyond what any written number reaches, then they cost nothing", () => {
    const { gbnf, issues } = jsonSchemaGrammar({
      type: "number",
      minimum: -9007199254740991,
      maximum: 9007199254740991,
    });
    expect(issues).toEqual([]);
    expect(gbnf).not.toMatch(/\[eE\]/); // no exponent: 1e50 would break them
  });
});

describe("the enforced subset", () => {
  test.each([
    [{ type: "string", pattern: "^(?=a)a+$" }, "pattern"],
    [{ type: "string", pattern: "^(a)\\1$" }, "pattern"],
    [{ type: "string", pattern: "^\\p{L}+$" }, "pattern"],
    [{ type: "string", pattern: "\\bword" }, "pattern"],
    [{ type: "string", pattern: "a^b" }, "pattern"],
    [{ type: "string", pattern: "^(a*)*$" }, "pattern"],
    [{ type: "string", pattern: "[" }, "pattern"],
    [{ type: "string", pattern: "^[a-z]+[0-9]+$", maxLength: 5 }, "maxLength"],
    [{ type: "string", pattern: "[a-z]+", minLength: 2 }, "minLength"],
    [{ type: "string", pattern: "^(?:a|bc)+$", maxLength: 5 }, "maxLength"],
    [{ type: "string", pattern: "^[a-z]{2}$", minLength: 3 }, "minLength"],
    [{ type: "string", format: "email", maxLength: 100 }, "maxLength"],
    [{ type: "string", format: "date", minLength: 11 }, "minLength"],
    [{ type: "string", format: "email", pattern: "^[a-z]+@x\\.com$" }, "format"],
    [{ type: "string", format: "hostname" }, "format"],
    [{ oneOf: [{ type: "string" }, { type: "string", maxLength: 3 }] }, "oneOf"],
    [{ oneOf: [{ type: "number" }, { type: "integer" }] }, "oneOf"],
    [{ oneOf: [{ enum: ["a", "b"] }, { type: "string" }] }, "oneOf"],
    [{ oneOf: [{ type: "object", properties: { k: { const: "a" } } }, { type: "object" }] }, "oneOf"],
    [{ oneOf: [{ type: "null" }, {}] }, "oneOf"],
    [{ type: "number", multipleOf: 2 }, "multipleOf"],
    [{ type: "number", maximum: 0.30000000000000004 }, "maximum"],
    [{ type: "number", minimum: 3.141592653589793 }, "minimum"],
    [{ type: "number", exclusiveMinimum: 2, maximum: 2 }, "exclusiveMinimum"],
    [{ type: "array", items: { type: "string" }, uniqueItems: true }, "uniqueItems"],
    [{ allOf: [{ type: "string" }] }, "allOf"],
    [{ not: { type: "string" } }, "not"],
    [{ type: "object", properties: { a: { type: "string" } }, patternProperties: { x: {} } }, "patternProperties"],
    [{ type: "object", properties: { a: { $ref: "#/$defs/missing" } } }, "$ref"],
  ])("when a schema uses %j, then %s is named as not enforced", (schema, keyword) => {
    const { issues } = jsonSchemaGrammar(schema);
    expect(issues.map((i) => i.keyword)).toContain(keyword);
  });

  test.each([
    [{ $defs: { a: { $ref: "#/$defs/b" }, b: { $ref: "#/$defs/a" } }, $ref: "#/$defs/a" }, "#/$ref"],
    [{ anyOf: [{ $ref: "#" }, { type: "null" }] }, "#/anyOf/0/$ref"],
    [{ $defs: { a: { oneOf: [{ type: "null" }, { $ref: "#/%24defs/a" }] } }, $ref: "#/$defs/a" }, "#/$ref"],
  ])("when %j comes back to itself before any value, then a fatal $ref issue names %s", (schema, path) => {
    const { issues } = jsonSchemaGrammar(schema);
    expect(issues).toEqual([expect.objectContaining({ keyword: "$ref", path, fatal: true })]);
  });

  test("when a recursion reads input first (through an object or an array), then nothing is reported", () => {
    const schema = {
      type: "object",
      properties: {
        next: { anyOf: [{ $ref: "#" }, { type: "null" }] },
        kids: { type: "array", items: { $ref: "#/$defs/k" } },
      },
      $defs: { k: { anyOf: [{ $ref: "#" }, { type: "string" }] } },
    };
    expect(jsonSchemaGrammar(schema).issues).toEqual([]);
  });

  test.each([
    [{ oneOf: [{ type: "string" }, { type: "null" }] }],
    [{ oneOf: [{ type: "integer" }, { type: "string" }, { type: "array", items: { type: "boolean" } }] }],
    [{ oneOf: [{ enum: ["a", "b"] }, { const: "c" }, { type: "number" }] }],
    [{ oneOf: [{ anyOf: [{ type: "string" }, { type: "null" }] }, { type: "boolean" }] }],
    [
      {
        $defs: { cat: { type: "object", properties: { kind: { const: "cat" } }, required: ["kind"] } },
        oneOf: [
          { $ref: "#/$defs/cat" },
          {
            type: "object",
            properties: { kind: { enum: ["dog", "fox"] }, n: { type: "integer" } },
            required: ["kind"],
          },
        ],
      },
    ],
  ])("when the alternatives of %j cannot both match, then its oneOf is enforced", (schema) => {
    expect(jsonSchemaGrammar(schema).issues).toEqual([]);
  });

  test("when zod writes a discriminated union, then its oneOf is enforced as it comes", () => {
    const pet = z.discriminatedUnion("kind", [
      z.object({ kind: z.literal("cat"), lives: z.number().int().min(0).max(9) }),
      z.object({ kind: z.literal("dog"), good: z.boolean() }),
    ]);
    const schema = z.toJSONSchema(z.object({ pet }));
    expect(JSON.stringify(schema)).toMatch(/"oneOf"/);
    expect(jsonSchemaGrammar(schema).issues).toEqual([]);
  });

  test("when zodResponseFormat's schema comes as it is (nullable, safe-integer bounds, $defs), then nothing is left unenforced", () => {
    const schema = {
      type: "object",
      properties: {
        name: { type: "string" },
        age: { type: "integer", minimum: -9007199254740991, maximum: 9007199254740991 },
        nick: { anyOf: [{ type: "string" }, { type: "null" }] },
        tags: { type: "array", items: { type: "string", enum: ["a", "b"] }, maxItems: 3 },
        best: { $ref: "#/definitions/friend" },
      },
      required: ["name", "age", "nick", "tags", "best"],
      additionalProperties: false,
      definitions: {
        friend: {
          type: "object",
          properties: { name: { type: "string" }, since: { type: "string", format: "date" } },
          required: ["name", "since"],
          additionalProperties: false,
        },
      },
      $schema: "http://json-schema.org/draft-07/schema#",
    };
    expect(jsonSchemaGrammar(schema).issues).toEqual([]);
  });
});

/** Schemas within the documented subset, nested a few levels. */
const leaf = fc.oneof(
  fc.constant({ type: "boolean" }),
  fc.constant({ type: "null" }),
  fc.record({ type: fc.constant("string"), maxLength: fc.integer({ min: 1, max: 12 }) }),
  fc
    .tuple(fc.integer({ min: 0, max: 3 }), fc.integer({ min: 0, max: 8 }))
    .map(([min, extra]) => ({ type: "string", minLength: min, maxLength: min + extra })),
  fc.record({ type: fc.constant("string"), minLength: fc.integer({ min: 1, max: 4 }) }),
  fc.integer({ min: 3, max: 10 }).map((n) => ({ type: "string", minLength: n, maxLength: n })),
  fc.record({
    type: fc.constant("string"),
    format: fc.constantFrom("date", "time", "date-time", "uuid", "email", "ipv4"),
  }),
  fc.record({
    type: fc.constant("string"),
    enum: fc.uniqueArray(fc.string({ maxLength: 6 }), { minLength: 1, maxLength: 4 }),
  }),
  fc
    .tuple(fc.integer({ min: -1000, max: 1000 }), fc.integer({ min: 0, max: 2000 }))
    .map(([lo, span]) => ({ type: "integer", minimum: lo, maximum: lo + span })),
  fc.record({ type: fc.constant("integer"), exclusiveMinimum: fc.integer({ min: -50, max: 50 }) }),
  fc.constant({ type: "integer", minimum: -9007199254740991, maximum: 9007199254740991 }),
  fc.constant({ type: "number" }),
  fc.constant({ type: "number", minimum: 0 }),
  fc.constant({ type: "number", exclusiveMinimum: 0 }),
  fc
    .tuple(fc.integer({ min: -400, max: 400 }), fc.integer({ min: 1, max: 80 }), fc.boolean(), fc.boolean())
    .map(([lo, span, exLo, exHi]) => ({
      type: "number",
      [exLo ? "exclusiveMinimum" : "minimum"]: lo / 8,
      [exHi ? "exclusiveMaximum" : "maximum"]: (lo + span) / 8,
    })),
  fc
    .tuple(fc.integer({ min: -50, max: 50 }), fc.integer({ min: 0, max: 10 }), fc.boolean(), fc.boolean())
    .map(([lo, span, exLo, exHi]) => ({
      type: "number",
      [exLo && span > 0 ? "exclusiveMinimum" : "minimum"]: lo,
      [exHi && span > 0 ? "exclusiveMaximum" : "maximum"]: lo + span,
    })),
  fc.constantFrom(
    { type: "string", pattern: "^[a-z]{2,5}$" },
    { type: "string", pattern: '^\\d{3}-[A-Z]+(?:\\.[^\\s"]{1,3})?$' },
    { type: "string", pattern: "x|y+" },
  ),
  fc.record({ const: fc.oneof(fc.string({ maxLength: 5 }), fc.integer(), fc.boolean()) }),
);

/**
 * Schemas within the subset whose `$ref`s name only `refs` (pointers into the root the sample is
 * put under), plus `{anyOf: [null, {$ref: "#"}]}`: recursion through the root, which makes
 * progress (the root is an object). `oneOf` alternatives are of disjoint types, so the pick is
 * exactly one of them.
 */
function schemaArbitrary(refs: string[]): fc.Arbitrary<Record<string, unknown>> {
  const ref = fc.oneof(
    ...refs.map((r) => fc.constant({ $ref: r })),
    fc.constant({ anyOf: [{ type: "null" }, { $ref: "#" }] }),
  );
  return fc.letrec((tie) => ({
    node: fc.oneof(
      { depthSize: "small", withCrossShrink: true },
      leaf,
      tie("object"),
      tie("array"),
      tie("anyOf"),
      tie("oneOf"),
      tie("tuple"),
      ref,
    ),
    object: fc
      .uniqueArray(fc.tuple(fc.stringMatching(/^[a-z][a-z_]{0,7}$/), tie("node"), fc.boolean()), {
        minLength: 1,
        maxLength: 4,
        selector: ([k]) => k,
      })
      .map((props) => ({
        type: "object",
        properties: Object.fromEntries(props.map(([k, s]) => [k, s])),
        required: props.filter(([, , req]) => req).map(([k]) => k),
        additionalProperties: false,
      })),
    array: fc
      .tuple(tie("node"), fc.integer({ min: 0, max: 2 }), fc.integer({ min: 0, max: 3 }))
      .map(([items, min, extra]) => ({ type: "array", items, minItems: min, maxItems: min + extra })),
    tuple: fc
      .tuple(
        fc.array(tie("node"), { minLength: 1, maxLength: 2 }),
        fc.oneof(fc.constant(undefined), fc.constant(false), tie("node")),
        fc.integer({ min: 0, max: 3 }),
        fc.integer({ min: 0, max: 2 }),
      )
      .map(([prefixItems, items, min, extra]) => ({
        type: "array",
        prefixItems,
        ...(items === undefined ? {} : { items }),
        // With `items: false` at most the prefix can be written.
        minItems: items === false ? Math.min(min, prefixItems.length) : min,
        maxItems: (items === false ? Math.min(min, prefixItems.length) : min) + extra,
      })),
    anyOf: fc.tuple(tie("node"), fc.constant({ type: "null" })).map(([a, b]) => ({ anyOf: [a, b] })),
    oneOf: fc
      .tuple(tie("object"), fc.constantFrom({ type: "null" }, { type: "string", maxLength: 4 }, { type: "boolean" }))
      .map(([a, b]) => ({ oneOf: [a, b] })),
  })).node as fc.Arbitrary<Record<string, unknown>>;
}
const schemaArb = schemaArbitrary([]);
/** A recursive definition with progress: a list that ends with null. */
const listDef = {
  anyOf: [
    { type: "null" },
    {
      type: "object",
      properties: { v: { type: "integer", minimum: 0, maximum: 99 }, next: { $ref: "#/$defs/list" } },
      required: ["v", "next"],
      additionalProperties: false,
    },
  ],
};
/** Root schemas: `{answer}` with `$defs` (d1 may name d0, answer both and the list) and `definitions`. */
const rootArb = fc
  .tuple(
    schemaArbitrary([]),
    schemaArbitrary(["#/$defs/d0"]),
    schemaArbitrary(["#/$defs/d0", "#/$defs/d1", "#/$defs/list", "#/definitions/tree"]),
  )
  .map(([d0, d1, answer]) => ({
    type: "object",
    properties: { answer },
    required: ["answer"],
    additionalProperties: false,
    $defs: { d0, d1, list: listDef },
    definitions: {
      tree: {
        type: "object",
        properties: { kids: { type: "array", items: { $ref: "#/definitions/tree" }, maxItems: 2 } },
        additionalProperties: false,
      },
    },
  }));

describe("answers decoded under the grammar (tiny model)", () => {
  let llama: Llama;
  let model: LlamaModel;
  let context: LlamaContext;
  /** BOS never sampled, as the engine does under a grammar (`generation.ts`): its text "<s>" fits many strings. */
  const noBos = () => TokenBias.for(model).set(model.tokens.bos!, "never");
  /** The context's one sequence, shared by the tests. */
  let shared: LlamaContextSequence | undefined;
  const ajv = addFormats(new Ajv2020({ strict: false, allErrors: true }));

  beforeAll(async () => {
    llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
    model = await llama.loadModel({ modelPath: path.join(MODELS_DIR, "stories260K.gguf") });
    context = await model.createContext({ contextSize: 1024, threads: 1 });
  }, 60_000);
  afterAll(async () => {
    await context?.dispose();
    await model?.dispose();
  });

  test("when 200 generated schemas within the subset are answered, then every answer that ends with stop parses and validates", async () => {
    const sequence = (shared ??= context.getSequence());
    const samples = fc.sample(rootArb, { numRuns: 200, seed: 26 });
    let stopped = 0;
    /** Stopped answers whose schema (`answer`'s own) uses each keyword. */
    const covered: Record<string, number> = {
      $ref: 0,
      '"#"': 0,
      prefixItems: 0,
      oneOf: 0,
      minLength: 0,
      maxLength: 0,
      pattern: 0,
      '"number"': 0,
    };
    for (const [i, schema] of samples.entries()) {
      const { gbnf, issues } = jsonSchemaGrammar(schema);
      expect({ schema, issues }).toEqual({ schema, issues: [] });
      const grammar = await llama.createGrammar({ grammar: gbnf });
      const completion = new LlamaCompletion({ contextSequence: sequence });
      const out = await completion.generateCompletionWithMeta("Once upon a time", {
        grammar,
        tokenBias: noBos(),
        maxTokens: 256,
        temperature: 1,
        seed: i,
      });
      await sequence.clearHistory();
      if (out.metadata.stopReason !== "eogToken") continue;
      stopped++;
      const used = JSON.stringify(schema.properties.answer);
      for (const k of Object.keys(covered)) if (used.includes(k)) covered[k]++;
      let value: unknown;
      expect(() => (value = JSON.parse(out.response))).not.toThrow();
      const validate = ajv.compile(schema);
      const valid = validate(value);
      expect({ schema, answer: value, errors: valid ? null : validate.errors }).toEqual({
        schema,
        answer: value,
        errors: null,
      });
    }
    // Most answers are short enough to finish; a grammar that never lets the model stop fails here.
    expect(stopped).toBeGreaterThan(100);
    // The generated schemas exercise refs (recursion through `#` too), tuples, oneOf and length bounds.
    for (const [k, n] of Object.entries(covered)) expect([k, n >= 10]).toEqual([k, true]);
  }, 300_000);

  /** Answers `schema` `runs` times (seeds 0…); each answer that stops must parse and validate. */
  async function answerEach(schema: Record<string, unknown>, runs: number): Promise<unknown[]> {
    const sequence = (shared ??= context.getSequence());
    const { gbnf, issues } = jsonSchemaGrammar(schema);
    expect({ schema, issues }).toEqual({ schema, issues: [] });
    const grammar = await llama.createGrammar({ grammar: gbnf });
    const validate = ajv.compile(schema);
    const values: unknown[] = [];
    for (let seed = 0; seed < runs; seed++) {
      const completion = new LlamaCompletion({ contextSequence: sequence });
      const out = await completion.generateCompletionWithMeta("Once upon a time", {
        grammar,
        tokenBias: noBos(),
        maxTokens: 160,
        temperature: 1,
        seed,
      });
      await sequence.clearHistory();
      if (out.metadata.stopReason !== "eogToken") continue;
      const value: unknown = JSON.parse(out.response);
      expect({ value, valid: validate(value), errors: validate.errors }).toMatchObject({ valid: true });
      values.push(value);
    }
    return values;
  }

  test.each([
    "^[A-Z]{3}-\\d{2}$",
    "ab+c",
    "(?<pet>cat|dog)s?",
    "^(?:foo|bar)+\\.(json|ya?ml)$",
    '^["\\\\]{1,3}[^a-z"]{2}$',
    "^\\w+\\s\\W\\D\\S.$",
    "^\\x41\\u0042\\u{1F600}?[\\t\\n]$",
    "^[^\\n]{0,5}$",
    "^$",
    // zod's .time(), and .email() / .datetime() (format and pattern, one rule for both).
    ...Object.values(z.toJSONSchema(z.object({ t: z.iso.time(), e: z.email(), d: z.iso.datetime() })).properties!).map(
      (p) => JSON.stringify(p),
    ),
    // Length bounds beside a pattern: narrowed onto its one repeated part, or implied by it.
    JSON.stringify({ type: "string", pattern: "^[a-z]+$", minLength: 3, maxLength: 5 }),
    JSON.stringify({ type: "string", pattern: "^\\d{3}-[A-Z]*$", minLength: 6, maxLength: 7 }),
    JSON.stringify({ type: "string", pattern: "^(?:ab)+$|^x+$", maxLength: 4 }),
    JSON.stringify({ type: "string", pattern: "^[A-Z]{2}\\d{2}$", minLength: 4, maxLength: 4 }),
    // zod's .email().max(254) and .uuid().min(36): the format's rule keeps within them.
    ...Object.values(z.toJSONSchema(z.object({ e: z.email().max(254), u: z.uuid().min(36) })).properties!).map((p) =>
      JSON.stringify(p),
    ),
  ])(
    "when a string has the pattern %s, then every answer that stops matches it",
    async (pattern) => {
      const property = pattern.startsWith("{") ? JSON.parse(pattern) : { type: "string", pattern };
      const schema = { type: "object", properties: { v: property }, required: ["v"], additionalProperties: false };
      const values = await answerEach(schema, 12);
      expect(values.length).toBeGreaterThan(3);
    },
    120_000,
  );

  test("when a class could spell BOS's text (<s>), then BOS is never sampled and every stopped answer matches", async () => {
    const sequence = (shared ??= context.getSequence());
    const pattern = "^\\d{3}-[A-Z]+(?:\\.[#-~]{1,3})?$";
    const grammar = await llama.createGrammar({ grammar: jsonSchemaGrammar({ type: "string", pattern }).gbnf });
    let stopped = 0;
    for (let seed = 0; seed < 120; seed++) {
      const completion = new LlamaCompletion({ contextSequence: sequence });
      const out = await completion.generateCompletionWithMeta("Once", {
        grammar,
        tokenBias: noBos(),
        maxTokens: 40,
        temperature: 1,
        seed,
      });
      await sequence.clearHistory();
      if (out.metadata.stopReason !== "eogToken") continue;
      stopped++;
      const value = JSON.parse(out.response) as string;
      expect([seed, value, new RegExp(pattern, "u").test(value)]).toEqual([seed, value, true]);
    }
    expect(stopped).toBeGreaterThan(60);
  }, 120_000);

  test.each([
    { minimum: 0, maximum: 1 },
    { exclusiveMinimum: 0, exclusiveMaximum: 1 },
    { minimum: -5, exclusiveMaximum: 3 },
    { exclusiveMinimum: -2, maximum: -1 },
    { maximum: -3 },
    { minimum: 7, maximum: 7 },
    { minimum: 0.25, maximum: 0.75 },
    { exclusiveMinimum: -1.5, exclusiveMaximum: -1.25 },
    { maximum: 3.5 },
  ])(
    "when a number has %j, then every answer that stops is within",
    async (bounds) => {
      const schema = {
        type: "object",
        properties: { v: { type: "number", ...bounds } },
        required: ["v"],
        additionalProperties: false,
      };
      const values = await answerEach(schema, 12);
      expect(values.length).toBeGreaterThan(3);
    },
    120_000,
  );

  test("when generated schemas carry a keyword outside the subset, then each is reported", () => {
    const outside = fc.constantFrom(
      { pattern: "^(?!x)" },
      { multipleOf: 3 },
      { uniqueItems: true },
      { not: {} },
      { minProperties: 1 },
      { if: {} },
    );
    fc.assert(
      fc.property(schemaArb, outside, (schema, extra) => {
        const broken = { ...schema, ...extra };
        const keyword = Object.keys(extra)[0];
        // On an $ref, const, enum or anyOf node the extra keyword stands beside it; either way it is named.
        expect(jsonSchemaGrammar(broken).issues.map((i) => i.keyword)).toContain(keyword);
      }),
      { numRuns: 200, seed: 26 },
    );
  });
});
