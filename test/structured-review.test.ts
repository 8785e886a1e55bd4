/**
 * Structured outputs and forced tool calls on the embedded engine, review of issue 26 (findings
 * F2, F3, F5, F6, F8), through the official clients and raw HTTP with the tiny model:
 * - F2: a forced call's arguments decode under the tool's own `$defs` / `$ref` (`#` included);
 * - F3: a `$ref` cycle that reads no input is a 400 naming `$ref` whatever `strict` says, and a
 *   grammar llama.cpp cannot compile is a 400 naming the schema's field, never a 500;
 * - F5: `prefixItems` with `minItems` / `maxItems` is enforced;
 * - F6: a forced call cut short never comes back as text (chat, streamed, Anthropic, Responses,
 *   background Responses);
 * - F8: `stop` with a structured output or a forced call is refused (synchronously and in a batch).
 */
import { Ajv2020 } from "ajv/dist/2020.js";
import { LlamaLogLevel, getLlama } from "node-llama-cpp";
import { GrammarCache } from "../src/inference/engines/llama-cpp/structured-decoding.js";
import { forcedCallFormat } from "../src/inference/engines/llama-cpp/tool-calls.js";
import { AppError } from "../src/shared/errors.js";
import {
  CHAT_MODEL,
  type TestServer,
  anthropicClient,
  createTestCaller,
  eventually,
  expectEnvelope,
  expectInvalid,
  http,
  openaiClient,
  startTestServer,
} from "./support/harness.js";
import { writeEditedCatalog } from "./support/test-catalog.js";

const ajv = new Ajv2020({ strict: false });

let server: TestServer;
let caller: Awaited<ReturnType<typeof createTestCaller>>;

beforeAll(async () => {
  // Tool definitions take hundreds of this tiny tokenizer's tokens: a context of 2,048 holds them.
  const catalog = writeEditedCatalog((c) => {
    const chat = c.models.find((m) => m.id === CHAT_MODEL)!;
    (chat.engine as { context_size?: number }).context_size = 2048;
  });
  server = await startTestServer({ catalogPath: catalog });
  caller = await createTestCaller(server.url);
}, 60_000);
afterAll(() => server.close());

const ask = { model: CHAT_MODEL, messages: [{ role: "user" as const, content: "Once upon a time" }] };
/** The repro of F2: a property through `$defs`, and a recursion through `#`. */
const refParams = {
  type: "object",
  properties: {
    p: { $ref: "#/$defs/P" },
    next: { anyOf: [{ $ref: "#" }, { type: "null" }] },
  },
  required: ["p", "next"],
  additionalProperties: false,
  $defs: { P: { type: "integer", minimum: 5, maximum: 7 } },
};
const weatherParams = {
  type: "object",
  properties: { city: { type: "string", maxLength: 20 }, days: { type: "integer", minimum: 1, maximum: 7 } },
  required: ["city", "days"],
  additionalProperties: false,
};
const weather = [{ type: "function" as const, function: { name: "get_weather", parameters: weatherParams } }];

describe("F2: forced calls whose parameters use $ref / $defs", () => {
  test("when the call grammar is built, then every ref names the schema it named in the tool's own document", () => {
    const { schema } = forcedCallFormat(
      [
        { name: "t", parameters: refParams, strict: true },
        {
          name: "u",
          parameters: { type: "object", properties: { q: { $ref: "#/$defs/P" } }, $defs: {} },
          strict: false,
        },
      ],
      ["t"],
    ) as { schema: Record<string, unknown> };
    const validate = ajv.compile(schema);
    const own = ajv.compile(refParams);
    const samples = [
      { p: 5, next: null },
      { p: 7, next: { p: 6, next: null } },
      { p: 4, next: null },
      { p: "Wone", next: null },
      { p: 6, next: { name: "t", arguments: { p: 6, next: null } } },
      { p: 6, next: { p: 8, next: null } },
    ];
    for (const args of samples) {
      expect([args, validate({ name: "t", arguments: args })]).toEqual([args, own(args)]);
    }
    // Several calls (parallel calls allowed): an array of them, the refs resolving the same way.
    const many = ajv.compile(
      (forcedCallFormat([{ name: "t", parameters: refParams, strict: true }], ["t"], 8) as any).schema,
    );
    for (const args of samples) {
      const call = { name: "t", arguments: args };
      expect([args, many([call, call])]).toEqual([args, own(args)]);
    }
    expect(many([])).toBe(false);
  });

  test("when a strict tool's parameters use $defs and # and a call is required, then the arguments validate against them", async () => {
    const client = openaiClient(server.url, caller.key);
    const tools = [{ type: "function" as const, function: { name: "pick", strict: true, parameters: refParams } }];
    let called = 0;
    for (let seed = 0; seed < 4; seed++) {
      const completion = await client.chat.completions.create({
        ...ask,
        tools,
        tool_choice: "required",
        parallel_tool_calls: false,
        max_tokens: 300,
        seed,
      });
      const choice = completion.choices[0];
      if (choice.finish_reason === "length") continue;
      expect(choice.finish_reason).toBe("tool_calls");
      const args = JSON.parse((choice.message.tool_calls![0] as any).function.arguments);
      expect({ args, valid: ajv.validate(refParams, args) }).toEqual({ args, valid: true });
      called++;
    }
    expect(called).toBeGreaterThan(0);
  });
});

describe("F3: $ref cycles that read no input, and grammars llama.cpp refuses", () => {
  const chain = { $defs: { a: { $ref: "#/$defs/b" }, b: { $ref: "#/$defs/a" } }, $ref: "#/$defs/a" };
  const left = { anyOf: [{ $ref: "#" }, { type: "null" }] };

  test.each([
    [chain, false, "response_format.json_schema.schema.$ref"],
    [chain, true, "response_format.json_schema.schema.$ref"],
    [left, false, "response_format.json_schema.schema.anyOf.0.$ref"],
    [left, true, "response_format.json_schema.schema.anyOf.0.$ref"],
  ])("when response_format's schema is %j (strict %s), then 400 names %s", async (schema, strict, field) => {
    const res = await http(server.url, "POST", "/v1/chat/completions", {
      token: caller.key,
      body: {
        ...ask,
        max_tokens: 8,
        response_format: { type: "json_schema", json_schema: { name: "s", schema, strict } },
      },
    });
    expectInvalid(res, field);
    expect(res.body.detail).toContain(CHAT_MODEL);
  });

  test("when a forced non-strict tool's parameters loop without input, then 400 names its $ref, in a batch item too", async () => {
    const tools = [{ type: "function", function: { name: "loop", parameters: chain } }];
    const body = { ...ask, tools, tool_choice: "required", max_tokens: 8 };
    const res = await http(server.url, "POST", "/v1/chat/completions", { token: caller.key, body });
    expectInvalid(res, "tools[0].function.parameters.$ref");
    const batch = await http(server.url, "POST", "/v1/batches", {
      token: caller.key,
      body: { requests: [{ custom_id: "loop", url: "/v1/chat/completions", body }] },
    });
    expectInvalid(batch, "requests[0].body.tools[0].function.parameters.$ref");
  });

  test("when llama.cpp cannot compile a grammar, then it is a 400 naming the schema's field", async () => {
    const grammars = new GrammarCache(() => getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.disabled }));
    const err = await grammars
      .compile("root ::= a\na ::= a\n", "response_format.json_schema.schema", "m")
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AppError);
    expect((err as AppError).status).toBe(400);
    expect((err as AppError).extra).toEqual([expect.objectContaining({ field: "response_format.json_schema.schema" })]);
  });
});

describe("F5: prefixItems with item bounds", () => {
  test("when a strict schema has prefixItems and minItems / maxItems, then every answer that ends with stop holds them", async () => {
    const schema = {
      type: "object",
      properties: {
        a: {
          type: "array",
          prefixItems: [{ type: "string", maxLength: 4 }],
          items: { type: "integer", minimum: 0, maximum: 9 },
          minItems: 3,
          maxItems: 4,
        },
      },
      required: ["a"],
      additionalProperties: false,
    };
    const client = openaiClient(server.url, caller.key);
    let stopped = 0;
    for (let seed = 0; seed < 6; seed++) {
      const completion = await client.chat.completions.create({
        ...ask,
        max_tokens: 120,
        seed,
        response_format: { type: "json_schema", json_schema: { name: "s", schema, strict: true } },
      });
      const choice = completion.choices[0];
      if (choice.finish_reason !== "stop") continue;
      stopped++;
      const value = JSON.parse(choice.message.content!);
      expect({ value, valid: ajv.validate(schema, value) }).toEqual({ value, valid: true });
    }
    expect(stopped).toBeGreaterThan(0);
  });
});

describe("F6: a forced call cut short is never text", () => {
  const forced = { ...ask, tools: weather, tool_choice: "required" as const, max_tokens: 4 };

  test("when a chat forced call hits max_tokens, then no content, no call and no log-probs of it, finish_reason length", async () => {
    const client = openaiClient(server.url, caller.key);
    const completion = await client.chat.completions.create({ ...forced, logprobs: true });
    const choice = completion.choices[0];
    expect(choice.finish_reason).toBe("length");
    expect(choice.message.content).toBeNull();
    expect(choice.message.tool_calls).toBeUndefined();
    expect(choice.logprobs?.content ?? []).toEqual([]);
  });

  test("when it is streamed, then no chunk carries content or a call, and it ends with length", async () => {
    const client = openaiClient(server.url, caller.key);
    const stream = await client.chat.completions.create({ ...forced, stream: true });
    let text = "";
    let finish: string | null = null;
    let calls = 0;
    for await (const chunk of stream) {
      const choice = chunk.choices[0];
      if (!choice) continue;
      text += choice.delta.content ?? "";
      calls += choice.delta.tool_calls?.length ?? 0;
      finish = choice.finish_reason ?? finish;
    }
    expect({ text, calls, finish }).toEqual({ text: "", calls: 0, finish: "length" });
  });

  test("when an Anthropic any call hits max_tokens, then no block at all and stop_reason max_tokens, streamed too", async () => {
    const client = anthropicClient(server.url, caller.key);
    const body = {
      model: CHAT_MODEL,
      max_tokens: 4,
      messages: [{ role: "user" as const, content: "Weather?" }],
      tools: [{ name: "get_weather", input_schema: weatherParams }] as any,
      tool_choice: { type: "any" as const },
    };
    const message = await client.messages.create(body);
    expect({ content: message.content, stop: message.stop_reason }).toEqual({ content: [], stop: "max_tokens" });
    const stream = client.messages.stream(body);
    const events: string[] = [];
    stream.on("streamEvent", (e) => events.push(e.type));
    const streamed = await stream.finalMessage();
    expect({ content: streamed.content, stop: streamed.stop_reason }).toEqual({ content: [], stop: "max_tokens" });
    expect(events).not.toContain("content_block_start");
  });

  const responseBody = {
    model: CHAT_MODEL,
    input: "What is the weather?",
    max_output_tokens: 4,
    tools: [{ type: "function" as const, name: "get_weather", parameters: weatherParams, strict: true }],
    tool_choice: "required" as const,
  };

  test("when a Responses required call hits max_output_tokens, then no output item, incomplete, and the stored one too; streamed too", async () => {
    const client = openaiClient(server.url, caller.key);
    const response = await client.responses.create(responseBody);
    expect(response.status).toBe("incomplete");
    expect(response.incomplete_details).toEqual({ reason: "max_output_tokens" });
    expect(response.output).toEqual([]);
    expect(response.output_text).toBe("");
    const stored = await http(server.url, "GET", `/v1/responses/${response.id}`, { token: caller.key });
    expect(stored.body.output).toEqual([]);
    const stream = client.responses.stream(responseBody);
    const types: string[] = [];
    for await (const event of stream) types.push(event.type);
    expect(types.filter((t) => t.startsWith("response.output"))).toEqual([]);
    expect(types.at(-1)).toBe("response.incomplete");
    expect((await stream.finalResponse()).output).toEqual([]);
  });

  test("when a background Response's required call is cut short, then its stored output holds no text", async () => {
    const created = await http(server.url, "POST", "/v1/responses", {
      token: caller.key,
      body: { ...responseBody, background: true },
    });
    expect(created.status).toBe(200);
    let body: any;
    await eventually(async () => {
      body = (await http(server.url, "GET", `/v1/responses/${created.body.id}`, { token: caller.key })).body;
      return body?.status !== "in_progress" && body?.status !== "queued";
    }, 30_000);
    expect({ status: body.status, output: body.output }).toEqual({ status: "incomplete", output: [] });
  });
});

describe("F8: stop strings where a grammar decodes", () => {
  const schemaFormat = {
    type: "json_schema",
    json_schema: { name: "s", schema: { type: "object", properties: { a: { type: "string" } } } },
  };

  test("when chat combines stop with a json_schema, json_object or a forced call, then 400 names stop", async () => {
    for (const extra of [
      { response_format: schemaFormat },
      { response_format: { type: "json_object" } },
      { tools: weather, tool_choice: "required" },
    ]) {
      const res = await http(server.url, "POST", "/v1/chat/completions", {
        token: caller.key,
        body: { ...ask, max_tokens: 8, stop: ['"'], ...extra },
      });
      expectInvalid(res, "stop");
    }
  });

  test("when stop comes with tools under auto, then it is answered", async () => {
    const res = await http(server.url, "POST", "/v1/chat/completions", {
      token: caller.key,
      body: { ...ask, max_tokens: 8, stop: ["\n"], tools: weather },
    });
    expect(res.status).toBe(200);
  });

  test("when Anthropic combines stop_sequences with a forced tool, then 400 names stop_sequences", async () => {
    const res = await http(server.url, "POST", "/v1/messages", {
      token: caller.key,
      body: {
        model: CHAT_MODEL,
        max_tokens: 8,
        stop_sequences: ['"'],
        messages: [{ role: "user", content: "Weather?" }],
        tools: [{ name: "get_weather", input_schema: weatherParams }],
        tool_choice: { type: "tool", name: "get_weather" },
      },
    });
    expectInvalid(res, "stop_sequences");
  });

  test("when a batch item combines stop with a structured output, then the batch is refused naming it", async () => {
    const res = await http(server.url, "POST", "/v1/batches", {
      token: caller.key,
      body: {
        requests: [
          { custom_id: "s", url: "/v1/chat/completions", body: { ...ask, stop: ["}"], response_format: schemaFormat } },
        ],
      },
    });
    expectInvalid(res, "requests[0].body.stop");
  });

  test("when the key is missing, then 401", async () => {
    const res = await http(server.url, "POST", "/v1/chat/completions", {
      body: { ...ask, stop: ['"'], response_format: schemaFormat },
    });
    expectEnvelope(res, 401);
  });
});
