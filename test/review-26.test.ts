/**
 * Hostile review of issue 26 (structured outputs and tools) through real HTTP with the tiny model:
 * - R1: a number bound beyond ±10^15 that no written number reaches (`minimum: 1e21`) was
 *   compiled to `"1e+21" ("." digits)?`, so a strict answer ending with `stop` read
 *   `{"n": 1e+21.9}` (not JSON); it is now "no number is within the bounds" (400 under strict);
 * - R2: `oneOf` disjointness proofs took exponential time on small schemas (a recursive
 *   discriminator, nested `anyOf`s through `$defs`), blocking the event loop for seconds to hours;
 *   they are now bounded, and a `oneOf` past the bound is one that cannot be shown disjoint;
 * - R3: a tool whose parameters are not an object schema (`{type: "string"}`) was accepted, and a
 *   forced call under it could only come back empty; it is now a 400 naming `parameters.type`.
 */
import { jsonSchemaGrammar } from "../src/inference/structured/json-schema-gbnf.js";
import {
  CHAT_MODEL,
  type TestServer,
  createTestCaller,
  expectInvalid,
  http,
  startTestServer,
} from "./support/harness.js";

let server: TestServer;
let caller: Awaited<ReturnType<typeof createTestCaller>>;
beforeAll(async () => {
  server = await startTestServer();
  caller = await createTestCaller(server.url);
}, 60_000);
afterAll(() => server.close());

const chat = (schema: unknown, strict = true, extra: Record<string, unknown> = {}) =>
  http(server.url, "POST", "/v1/chat/completions", {
    token: caller.key,
    body: {
      model: CHAT_MODEL,
      messages: [{ role: "user", content: "Once upon a time" }],
      max_tokens: 40,
      response_format: { type: "json_schema", json_schema: { name: "x", strict, schema } },
      ...extra,
    },
  });

const object = (props: Record<string, unknown>) => ({
  type: "object",
  properties: props,
  required: Object.keys(props),
  additionalProperties: false,
});

describe("R1: number bounds beyond what a written number reaches", () => {
  test.each([
    [{ type: "number", minimum: 1e21 }, "minimum"],
    [{ type: "number", exclusiveMinimum: 1e308 }, "exclusiveMinimum"],
    [{ type: "number", maximum: -1e21 }, "maximum"],
  ])("when %j is compiled, then it is an issue, never a grammar of non-JSON", (schema, keyword) => {
    const { gbnf, issues } = jsonSchemaGrammar(schema);
    expect(issues.map((i) => i.keyword)).toEqual([keyword]);
    expect(gbnf).not.toContain("e+");
  });

  test("when a strict schema has minimum 1e21, then the request is a 400 naming the property", async () => {
    const res = await chat(object({ n: { type: "number", minimum: 1e21 } }));
    expectInvalid(res, "response_format.json_schema.schema.properties.n");
  });

  test("when the schema is not strict, then an answer that ends with stop still parses", async () => {
    const res = await chat(object({ n: { type: "number", minimum: 1e21 } }), false, { max_tokens: 60 });
    expect(res.status).toBe(200);
    const choice = res.body.choices[0];
    if (choice.finish_reason === "stop") expect(() => JSON.parse(choice.message.content)).not.toThrow();
  });
});

describe("R2: oneOf proofs are bounded", () => {
  /** `oneOf: [A, B]`, each requiring `n` properties that are themselves A (or B). */
  const recursive = (n: number) => {
    const keys = Array.from({ length: n }, (_, i) => `p${i}`);
    const obj = (tag: string) => ({
      type: "object",
      properties: Object.fromEntries(keys.map((k) => [k, { $ref: `#/$defs/${tag}` }])),
      required: keys,
      additionalProperties: false,
    });
    return { oneOf: [{ $ref: "#/$defs/A" }, { $ref: "#/$defs/B" }], $defs: { A: obj("A"), B: obj("B") } };
  };
  /** `oneOf: [D0, null]`, D0 … D6 each an `anyOf` of `n` refs to the next, D7 a string. */
  const nested = (n: number) => {
    const $defs: Record<string, unknown> = { D7: { type: "string" } };
    for (let d = 6; d >= 0; d--)
      $defs[`D${d}`] = { anyOf: Array.from({ length: n }, () => ({ $ref: `#/$defs/D${d + 1}` })) };
    return { oneOf: [{ $ref: "#/$defs/D0" }, { type: "null" }], $defs };
  };

  test("when a recursive discriminator with 12 properties is compiled, then it ends with a oneOf issue", () => {
    // Unbounded: 12^9 comparisons (hours); 5 properties already took 16 s.
    expect(jsonSchemaGrammar(recursive(12)).issues.map((i) => i.keyword)).toEqual(["oneOf"]);
  }, 20_000);

  test("when anyOfs of 12 refs nest 7 deep under a oneOf, then it ends with a oneOf issue", () => {
    // Unbounded: 12^7 type lookups (minutes); 8 alternatives already took 9 s.
    expect(jsonSchemaGrammar(nested(12)).issues.map((i) => i.keyword)).toEqual(["oneOf"]);
  }, 20_000);

  test("when a small nested oneOf is compiled, then it is still proven disjoint", () => {
    expect(jsonSchemaGrammar(nested(3)).issues).toEqual([]);
  });

  test("when the blowup schema is sent strict, then it is a 400 naming oneOf", async () => {
    const res = await chat(nested(12));
    expectInvalid(res, "response_format.json_schema.schema.oneOf");
  }, 20_000);
});

describe("R3: a function's parameters must be an object schema", () => {
  test("when a forced tool's parameters are a string schema, then the request is a 400 naming their type", async () => {
    const res = await http(server.url, "POST", "/v1/chat/completions", {
      token: caller.key,
      body: {
        model: CHAT_MODEL,
        max_tokens: 40,
        tool_choice: "required",
        tools: [{ type: "function", function: { name: "g", parameters: { type: "string" } } }],
        messages: [{ role: "user", content: "hi" }],
      },
    });
    expectInvalid(res, "tools[0].function.parameters.type");
  });
});
