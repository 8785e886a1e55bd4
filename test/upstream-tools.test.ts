/**
 * Tools and structured outputs through the upstream engine (issue 26, item 5): a gateway
 * Switchyard whose catalog routes `up-tools` (`capabilities.tools: true`) to a second Switchyard on
 * loopback, which serves the tiny model on its embedded engine. The gateway sends the request's
 * `tools`, `tool_choice`, `parallel_tool_calls` as asked, tool turns and `response_format` upstream
 * as OpenAI's chat format (read back from the upstream's own activity `body_json`), assembles the
 * streamed `delta.tool_calls` into the call, and answers it in each protocol's terms with its own
 * ids — called with the official `openai` and `@anthropic-ai/sdk` clients.
 */
import { Ajv } from "ajv";
import {
  CHAT_MODEL,
  type TestServer,
  anthropicClient,
  createTestCaller,
  expectEnvelope,
  expectInvalid,
  http,
  openaiClient,
  startTestServer,
} from "./support/harness.js";
import { readToolCallStream } from "./support/inference.js";
import { writeEditedCatalog } from "./support/test-catalog.js";

const ajv = new Ajv({ strict: false });
const MODEL = "up-tools";

let upstream: TestServer;
let gateway: TestServer;
let key: string;

beforeAll(async () => {
  // Tool definitions take hundreds of the tiny tokenizer's tokens: a context of 2,048 holds them.
  const upstreamCatalog = writeEditedCatalog((c) => {
    const chat = c.models.find((m) => m.id === CHAT_MODEL)!;
    (chat.engine as { context_size?: number }).context_size = 2048;
    // The embedded engine serves tools whatever the entry says; /v1/models must say so (below).
    (chat.capabilities as { tools: boolean }).tools = false;
  });
  upstream = await startTestServer({ catalogPath: upstreamCatalog });
  const account = await createTestCaller(upstream.url);
  const gatewayCatalog = writeEditedCatalog((c) => {
    const chat = c.models.find((m) => m.id === CHAT_MODEL)!;
    const upstreamModel = (id: string, tools: boolean) => ({
      ...chat,
      id,
      display_name: id,
      context_tokens: 2048,
      capabilities: { ...(chat.capabilities as object), tools },
      engine: { type: "openai_compatible", upstream_model: CHAT_MODEL },
    });
    c.models.push(upstreamModel(MODEL, true), upstreamModel("up-no-tools", false));
  });
  gateway = await startTestServer({
    catalogPath: gatewayCatalog,
    upstreams: [{ name: "a", base_url: `${upstream.url}/v1`, api_key: account.key, models: [CHAT_MODEL] }],
  });
  key = (await createTestCaller(gateway.url)).key;
}, 120_000);

afterAll(async () => {
  await gateway?.close();
  await upstream?.close();
});

const weatherParams = {
  type: "object",
  properties: {
    city: { type: "string", maxLength: 20 },
    unit: { type: "string", enum: ["celsius", "fahrenheit"] },
    days: { type: "integer", minimum: 1, maximum: 7 },
  },
  required: ["city", "unit", "days"],
  additionalProperties: false,
};
const timeParams = {
  type: "object",
  properties: { zone: { type: "string", maxLength: 10 } },
  required: ["zone"],
  additionalProperties: false,
};
const paramsOf: Record<string, object> = { get_weather: weatherParams, get_time: timeParams };
const tools = [
  { type: "function" as const, function: { name: "get_weather", description: "Weather", parameters: weatherParams } },
  { type: "function" as const, function: { name: "get_time", parameters: timeParams } },
];
const ask = { model: MODEL, messages: [{ role: "user" as const, content: "What is the weather?" }] };

/** What the upstream received and answered for the newest chat completion it served. */
async function upstreamCall(): Promise<{ body: any; result: any }> {
  const [row] = await upstream.db<{ body_json: unknown; result_json: unknown }>(
    `SELECT body_json, result_json FROM activity WHERE endpoint = '/v1/chat/completions'
      ORDER BY created_at DESC, id DESC LIMIT 1`,
  );
  return { body: row.body_json, result: row.result_json };
}

describe("Chat Completions tools through the upstream", () => {
  test("when tool_choice names a function, then the upstream gets tools and tool_choice and the answer is the call with our own id", async () => {
    const client = openaiClient(gateway.url, key);
    const completion = await client.chat.completions.create({
      ...ask,
      tools,
      tool_choice: { type: "function", function: { name: "get_weather" } },
      max_tokens: 200,
      seed: 1,
    });
    const choice = completion.choices[0];
    expect(choice.finish_reason).toBe("tool_calls");
    expect(choice.message.content).toBeNull();
    const call = choice.message.tool_calls![0] as { id: string; function: { name: string; arguments: string } };
    expect(call.id).toMatch(/^call_[A-Za-z0-9]{24}$/);
    expect(call.function.name).toBe("get_weather");
    expect(ajv.validate(weatherParams, JSON.parse(call.function.arguments))).toBe(true);

    const { body, result } = await upstreamCall();
    expect(body).toMatchObject({
      model: CHAT_MODEL,
      stream: true,
      tools: [
        { type: "function", function: { name: "get_weather", description: "Weather", parameters: weatherParams } },
        { type: "function", function: { name: "get_time", parameters: timeParams } },
      ],
      tool_choice: { type: "function", function: { name: "get_weather" } },
      parallel_tool_calls: false,
    });
    // The same call the upstream answered, under an id minted here.
    const theirs = result.choices[0].message.tool_calls[0];
    expect(theirs.function).toEqual(call.function);
    expect(theirs.id).not.toBe(call.id);
  });

  test("when tool_choice is required, then the upstream is asked for a required call with parallel calls as the caller asked, and every call it makes is answered", async () => {
    const client = openaiClient(gateway.url, key);
    // A small schema: the upstream's tiny model makes several calls of it within max_tokens.
    const timeTool = tools.filter((t) => t.function.name === "get_time");
    const body = { ...ask, tools: timeTool, tool_choice: "required" as const, max_tokens: 600, seed: 1 };
    const completion = await client.chat.completions.create(body);
    const calls = completion.choices[0].message.tool_calls as Array<{ id: string; function: object }>;
    const upstream = await upstreamCall();
    expect(upstream.body).toMatchObject({ tool_choice: "required", parallel_tool_calls: true });
    const theirs = upstream.result.choices[0].message.tool_calls as Array<{ id: string; function: object }>;
    expect(theirs.length).toBeGreaterThan(1);
    expect(calls.map((c) => c.function)).toEqual(theirs.map((c) => c.function));
    expect(new Set([...calls, ...theirs].map((c) => c.id)).size).toBe(calls.length * 2);
    for (const call of calls as any[])
      expect(ajv.validate(paramsOf[call.function.name], JSON.parse(call.function.arguments))).toBe(true);
    const one = await client.chat.completions.create({ ...body, parallel_tool_calls: false });
    expect(one.choices[0].message.tool_calls).toHaveLength(1);
    expect((await upstreamCall()).body.parallel_tool_calls).toBe(false);
  });

  test("when a forced call is streamed, then delta.tool_calls come as OpenAI streams them and join into a valid call", async () => {
    const client = openaiClient(gateway.url, key);
    const stream = await client.chat.completions.create({
      ...ask,
      tools,
      tool_choice: { type: "function", function: { name: "get_weather" } },
      max_tokens: 200,
      seed: 3,
      stream: true,
    });
    const { deltas, content, finish } = await readToolCallStream(stream);
    expect(finish).toBe("tool_calls");
    expect(content).toBe("");
    expect(deltas[0]).toMatchObject({ index: 0, type: "function", function: { name: "get_weather", arguments: "" } });
    expect(deltas[0].id).toMatch(/^call_/);
    expect(deltas.slice(1).every((d) => d.index === 0 && d.id === undefined && d.function.name === undefined)).toBe(
      true,
    );
    const args = deltas.map((d) => d.function.arguments).join("");
    expect(ajv.validate(weatherParams, JSON.parse(args))).toBe(true);
  });

  test("when the history holds a call and its tool result, then the upstream gets them as tool_calls and a tool message", async () => {
    const client = openaiClient(gateway.url, key);
    const call = {
      id: "call_abc",
      type: "function" as const,
      function: { name: "get_weather", arguments: '{"city":"Oslo","unit":"celsius","days":2}' },
    };
    const completion = await client.chat.completions.create({
      model: MODEL,
      tools,
      max_tokens: 8,
      messages: [
        { role: "user", content: "What is the weather in Oslo?" },
        { role: "assistant", content: null, tool_calls: [call] },
        { role: "tool", tool_call_id: "call_abc", content: "Snow all week." },
      ],
    });
    expect(completion.choices[0].message.role).toBe("assistant");
    const { body } = await upstreamCall();
    expect(body.messages).toEqual([
      { role: "user", content: "What is the weather in Oslo?" },
      { role: "assistant", content: null, tool_calls: [call] },
      { role: "tool", tool_call_id: "call_abc", content: "Snow all week." },
    ]);
    expect(body.tool_choice).toBe("auto");
  });

  test("when response_format is a json_schema, then the upstream gets it and the answer validates", async () => {
    const schema = {
      type: "object",
      properties: { name: { type: "string", maxLength: 12 }, age: { type: "integer", minimum: 0, maximum: 30 } },
      required: ["name", "age"],
      additionalProperties: false,
    };
    const client = openaiClient(gateway.url, key);
    const completion = await client.chat.completions.create({
      ...ask,
      response_format: { type: "json_schema", json_schema: { name: "pet", schema, strict: true } },
      max_tokens: 200,
      seed: 4,
    });
    expect(completion.choices[0].finish_reason).toBe("stop");
    expect(ajv.validate(schema, JSON.parse(completion.choices[0].message.content!))).toBe(true);
    expect((await upstreamCall()).body.response_format).toEqual({
      type: "json_schema",
      json_schema: { name: "pet", schema, strict: true },
    });
  });

  test("when the upstream cannot enforce a strict tool schema, then its 400 comes back naming the keyword", async () => {
    const strictTool = {
      type: "function",
      function: {
        name: "code",
        strict: true,
        parameters: { type: "object", properties: { c: { type: "string", pattern: "^(?!x)" } }, required: ["c"] },
      },
    };
    const res = await http(gateway.url, "POST", "/v1/chat/completions", {
      token: key,
      body: { ...ask, tools: [strictTool], tool_choice: "required", max_tokens: 20 },
    });
    expectInvalid(res, "tools[0].function.parameters.properties.c.pattern");
  });

  test("when an upstream model's catalog entry does not declare tools, then 400 names tools and the model; /v1/models says which do", async () => {
    const res = await http(gateway.url, "POST", "/v1/chat/completions", {
      token: key,
      body: { ...ask, model: "up-no-tools", tools },
    });
    expectInvalid(res, "tools");
    expect(res.body.detail).toContain("up-no-tools");
    const models = await http(gateway.url, "GET", "/v1/models", { token: key });
    const supported = (id: string) =>
      models.body.data.find((m: { id: string }) => m.id === id).capabilities.tools.supported;
    expect(supported(MODEL)).toBe(true);
    expect(supported("up-no-tools")).toBe(false);
    // The upstream's embedded model serves the calls above though its entry leaves tools out.
    const upstreamKey = (await createTestCaller(upstream.url)).key;
    const upstreamModels = await http(upstream.url, "GET", "/v1/models", { token: upstreamKey });
    const chat = upstreamModels.body.data.find((m: { id: string }) => m.id === CHAT_MODEL);
    expect(chat.capabilities.tools.supported).toBe(true);
  });

  test("when tools are offered, then their definitions count in the prompt tokens the upstream reports and the gateway records", async () => {
    const client = openaiClient(gateway.url, key);
    const plain = await client.chat.completions.create({ ...ask, max_tokens: 1 });
    const offered = await client.chat.completions.create({ ...ask, tools, tool_choice: "none", max_tokens: 1 });
    expect(offered.usage!.prompt_tokens).toBe(plain.usage!.prompt_tokens);
    const withTools = await client.chat.completions.create({ ...ask, tools, max_tokens: 1 });
    expect(withTools.usage!.prompt_tokens).toBeGreaterThan(plain.usage!.prompt_tokens + 50);
    const [ours] = await gateway.db<{ prompt_tokens: number }>("SELECT prompt_tokens FROM activity WHERE id = $1", [
      withTools.id.replace(/^chatcmpl-/, ""),
    ]);
    const [theirs] = await upstream.db<{ prompt_tokens: number }>(
      "SELECT prompt_tokens FROM activity ORDER BY created_at DESC, id DESC LIMIT 1",
    );
    expect(ours.prompt_tokens).toBe(withTools.usage!.prompt_tokens);
    expect(theirs.prompt_tokens).toBe(withTools.usage!.prompt_tokens);
  });

  test("when the key is missing, then 401", async () => {
    const res = await http(gateway.url, "POST", "/v1/chat/completions", { body: { ...ask, tools } });
    expectEnvelope(res, 401);
  });
});

describe("other protocols through the upstream", () => {
  test("when an Anthropic tool_choice names a tool, then the answer is a tool_use block with valid input, and a tool_result goes back as a tool message", async () => {
    const client = anthropicClient(gateway.url, key);
    const anthropicTools = [
      { name: "get_weather", description: "Weather", input_schema: weatherParams },
      { name: "get_time", input_schema: timeParams },
    ];
    const question = { role: "user" as const, content: "Weather?" };
    const message = await client.messages.create({
      model: MODEL,
      max_tokens: 200,
      messages: [question],
      tools: anthropicTools as any,
      tool_choice: { type: "tool", name: "get_weather" },
    });
    expect(message.stop_reason).toBe("tool_use");
    const block = message.content[0] as { type: string; id: string; name: string; input: unknown };
    expect(block).toMatchObject({ type: "tool_use", name: "get_weather" });
    expect(block.id).toMatch(/^toolu_[A-Za-z0-9]{24}$/);
    expect(ajv.validate(weatherParams, block.input)).toBe(true);
    expect((await upstreamCall()).body.tool_choice).toEqual({ type: "function", function: { name: "get_weather" } });

    await client.messages.create({
      model: MODEL,
      max_tokens: 8,
      tools: anthropicTools as any,
      messages: [
        question,
        { role: "assistant", content: [block as any] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: block.id, content: "Snow." }] },
      ],
    });
    const { body } = await upstreamCall();
    expect(body.messages.slice(1)).toEqual([
      {
        role: "assistant",
        content: null,
        tool_calls: [
          { id: block.id, type: "function", function: { name: "get_weather", arguments: JSON.stringify(block.input) } },
        ],
      },
      { role: "tool", tool_call_id: block.id, content: "Snow." },
    ]);
  });

  test("when a Responses tool_choice names a function, then the output is a function_call item, and its output goes back as a tool message", async () => {
    const client = openaiClient(gateway.url, key);
    const functionTools = [
      { type: "function" as const, name: "get_time", parameters: timeParams, strict: false },
      { type: "function" as const, name: "get_weather", parameters: weatherParams, strict: false },
    ];
    const response = await client.responses.create({
      model: MODEL,
      input: "What time is it?",
      tools: functionTools,
      tool_choice: { type: "function", name: "get_time" },
      max_output_tokens: 120,
    });
    const item = response.output[0] as { type: string; id: string; call_id: string; name: string; arguments: string };
    expect(item).toMatchObject({ type: "function_call", name: "get_time", status: "completed" });
    expect(item.id).toMatch(/^fc_/);
    expect(item.call_id).toMatch(/^call_/);
    expect(ajv.validate(timeParams, JSON.parse(item.arguments))).toBe(true);

    const next = await client.responses.create({
      model: MODEL,
      previous_response_id: response.id,
      input: [{ type: "function_call_output", call_id: item.call_id, output: "Noon." }],
      tools: functionTools,
      max_output_tokens: 8,
    });
    expect(next.previous_response_id).toBe(response.id);
    const { body } = await upstreamCall();
    expect(body.messages.slice(-2)).toEqual([
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id: item.call_id, type: "function", function: { name: "get_time", arguments: item.arguments } }],
      },
      { role: "tool", tool_call_id: item.call_id, content: "Noon." },
    ]);
  });
});
