/**
 * Tool calling on Chat Completions (issue 26, item 2) through the official `openai` client,
 * against the embedded engine with the tiny model: forced calls (a named function, `required`)
 * decode under the grammar of the allowed calls, plain and streamed exactly as OpenAI streams them,
 * `runTools` completes a round trip, tool calls and results in the history are read, `auto` never
 * returns a broken call, and the refusals name their field.
 */
import { Ajv } from "ajv";
import { parseToolCalls } from "../src/inference/engines/llama-cpp/tool-calls.js";
import {
  CHAT_MODEL,
  anthropicClient,
  type TestServer,
  createTestCaller,
  expectEnvelope,
  expectInvalid,
  http,
  openaiClient,
  startTestServer,
} from "./support/harness.js";
import { batchResults, readToolCallStream } from "./support/inference.js";
import { addUpstreamChat, writeEditedCatalog } from "./support/test-catalog.js";

const ajv = new Ajv({ strict: false });

let server: TestServer;
let caller: Awaited<ReturnType<typeof createTestCaller>>;

beforeAll(async () => {
  // Tool definitions take hundreds of this tiny tokenizer's tokens: a context of 2,048 holds them
  // (the grammar keeps the answers well-formed whatever the model makes of the extra positions).
  const catalog = writeEditedCatalog((c) => {
    const chat = addUpstreamChat(c, "up-chat");
    (chat.engine as { context_size?: number }).context_size = 2048;
    // An upstream model whose catalog entry does not declare tools (upstream-tools.test.ts has one that does).
    const up = c.models.at(-1)!;
    up.capabilities = { ...(up.capabilities as object), tools: false };
  });
  server = await startTestServer({
    catalogPath: catalog,
    upstreams: [{ name: "a", base_url: "http://127.0.0.1:9/v1", models: [CHAT_MODEL] }],
  });
  caller = await createTestCaller(server.url);
});
afterAll(() => server.close());

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
const tools = [
  { type: "function" as const, function: { name: "get_weather", description: "Weather", parameters: weatherParams } },
  { type: "function" as const, function: { name: "get_time", parameters: timeParams } },
];
const ask = { model: CHAT_MODEL, messages: [{ role: "user" as const, content: "What is the weather?" }] };
const paramsOf: Record<string, object> = { get_weather: weatherParams, get_time: timeParams };

describe("forced tool calls", () => {
  test("when tool_choice names a function, then the answer is that call with arguments valid against its schema", async () => {
    const client = openaiClient(server.url, caller.key);
    const ids = new Set<string>();
    for (let seed = 0; seed < 4; seed++) {
      const completion = await client.chat.completions.create({
        ...ask,
        tools,
        tool_choice: { type: "function", function: { name: "get_weather" } },
        max_tokens: 200,
        seed,
      });
      const choice = completion.choices[0];
      expect(choice.finish_reason).toBe("tool_calls");
      expect(choice.message.content).toBeNull();
      const call = choice.message.tool_calls![0] as {
        id: string;
        type: string;
        function: { name: string; arguments: string };
      };
      expect(call.id).toMatch(/^call_[A-Za-z0-9]{24}$/);
      expect(call.type).toBe("function");
      expect(call.function.name).toBe("get_weather");
      expect(ajv.validate(weatherParams, JSON.parse(call.function.arguments))).toBe(true);
      ids.add(call.id);
    }
    expect(ids.size).toBe(4);
  });

  test("when tool_choice is required without parallel calls, then the answer is one call of one of the tools with valid arguments", async () => {
    const client = openaiClient(server.url, caller.key);
    for (let seed = 0; seed < 4; seed++) {
      const completion = await client.chat.completions.create({
        ...ask,
        tools,
        tool_choice: "required",
        parallel_tool_calls: false,
        max_tokens: 200,
        seed,
      });
      expect(completion.choices[0].message.tool_calls).toHaveLength(1);
      const call = completion.choices[0].message.tool_calls![0] as { function: { name: string; arguments: string } };
      expect(["get_weather", "get_time"]).toContain(call.function.name);
      expect(ajv.validate(paramsOf[call.function.name], JSON.parse(call.function.arguments))).toBe(true);
    }
  });

  test("when a forced call is streamed, then id, type and name come once and the argument fragments join into the call", async () => {
    const client = openaiClient(server.url, caller.key);
    const stream = await client.chat.completions.create({
      ...ask,
      tools,
      tool_choice: { type: "function", function: { name: "get_weather" } },
      max_tokens: 200,
      seed: 5,
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
    const args = deltas.map((d) => d.function.arguments ?? "").join("");
    expect(ajv.validate(weatherParams, JSON.parse(args))).toBe(true);
  });

  test("when runTools calls a forced function, then the function runs with parsed arguments and the conversation ends", async () => {
    const client = openaiClient(server.url, caller.key);
    const seen: unknown[] = [];
    const runner = client.chat.completions.runTools({
      ...ask,
      max_tokens: 200,
      tool_choice: { type: "function", function: { name: "get_weather" } },
      tools: [
        {
          type: "function",
          function: {
            name: "get_weather",
            description: "Weather",
            parameters: weatherParams,
            parse: JSON.parse,
            function: (args: unknown) => {
              seen.push(args);
              return "sunny";
            },
          },
        },
      ],
    });
    await runner.done();
    expect(seen).toHaveLength(1);
    expect(ajv.validate(weatherParams, seen[0])).toBe(true);
    const messages = runner.messages;
    expect(messages.some((m) => m.role === "tool" && m.content === "sunny")).toBe(true);
  });
});

describe("tool calls and results in the history", () => {
  test("when the history holds an assistant tool call and its result, then they are read and count in the prompt", async () => {
    const client = openaiClient(server.url, caller.key);
    const history = [
      { role: "user" as const, content: "What is the weather?" },
      {
        role: "assistant" as const,
        content: null,
        tool_calls: [
          {
            id: "call_abc",
            type: "function" as const,
            function: { name: "get_weather", arguments: '{"city":"Paris","unit":"celsius","days":1}' },
          },
        ],
      },
      { role: "tool" as const, tool_call_id: "call_abc", content: "It is sunny and warm." },
    ];
    const withResult = await client.chat.completions.create({
      model: CHAT_MODEL,
      messages: history,
      tools,
      max_tokens: 8,
    });
    const without = await client.chat.completions.create({
      model: CHAT_MODEL,
      messages: history.slice(0, 1),
      tools,
      max_tokens: 8,
    });
    expect(withResult.usage!.prompt_tokens).toBeGreaterThan(without.usage!.prompt_tokens + 10);
  });

  test("when a tool message has no tool_call_id, then 400 names it", async () => {
    const res = await http(server.url, "POST", "/v1/chat/completions", {
      token: caller.key,
      body: { model: CHAT_MODEL, messages: [{ role: "tool", content: "x" }] },
    });
    expectInvalid(res, "messages[0].tool_call_id");
  });
});

describe("auto and refusals", () => {
  test("when tools are offered with auto, then the tiny model's answer is text or a well-formed call, never a broken one", async () => {
    const client = openaiClient(server.url, caller.key);
    for (let seed = 0; seed < 3; seed++) {
      const completion = await client.chat.completions.create({ ...ask, tools, max_tokens: 40, seed });
      const choice = completion.choices[0];
      if (choice.finish_reason === "tool_calls") {
        const call = choice.message.tool_calls![0] as { function: { arguments: string } };
        expect(() => JSON.parse(call.function.arguments)).not.toThrow();
      } else {
        expect(typeof choice.message.content).toBe("string");
        expect(choice.message.tool_calls).toBeUndefined();
      }
    }
  });

  test("when an auto answer holds a malformed or unknown call, then it stays text", () => {
    const specs = [{ name: "f", parameters: { type: "object" }, field: "tools[0]", strict: false }];
    const auto = { specs, mode: { kind: "auto" as const } };
    const first = (text: string) => parseToolCalls(text, auto)?.calls[0] ?? null;
    expect(first('<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>')).toEqual({
      name: "f",
      arguments: '{"a":1}',
    });
    expect(first('<tool_call>{"name": "f", "arguments": {"a": </tool_call>')).toBeNull();
    expect(first('<tool_call>{"name": "g", "arguments": {}}</tool_call>')).toBeNull();
    expect(first('<tool_call>{"name": "f", "arguments": [1]}</tool_call>')).toBeNull();
    expect(first('{"name": "f", "arguments": {}}')).toBeNull();
  });

  test("when tool_choice names a function not in tools, then 400 names it", async () => {
    const res = await http(server.url, "POST", "/v1/chat/completions", {
      token: caller.key,
      body: { ...ask, tools, tool_choice: { type: "function", function: { name: "nope" } } },
    });
    expectInvalid(res, "tool_choice.function.name");
  });

  test("when a strict tool uses a keyword the grammar cannot enforce, then 400 names its place", async () => {
    const strictTool = {
      type: "function",
      function: {
        name: "code",
        strict: true,
        parameters: { type: "object", properties: { c: { type: "string", pattern: "^(?!x)" } }, required: ["c"] },
      },
    };
    const res = await http(server.url, "POST", "/v1/chat/completions", {
      token: caller.key,
      body: { ...ask, tools: [strictTool], tool_choice: "required" },
    });
    expectInvalid(res, "tools[0].function.parameters.properties.c.pattern");
  });

  test("when a model served by an upstream engine not declared to serve tools is offered tools, then 400 names tools and the model", async () => {
    const res = await http(server.url, "POST", "/v1/chat/completions", {
      token: caller.key,
      body: { ...ask, model: "up-chat", tools },
    });
    expectInvalid(res, "tools");
    expect(res.body.detail).toContain("up-chat");
  });

  test("when the key is missing, then 401", async () => {
    const res = await http(server.url, "POST", "/v1/chat/completions", { body: { ...ask, tools } });
    expectEnvelope(res, 401);
  });
});

describe("Anthropic Messages tools", () => {
  const anthropicTools = [
    { name: "get_weather", description: "Weather", input_schema: weatherParams },
    { name: "get_time", input_schema: timeParams },
  ];
  const question = { model: CHAT_MODEL, max_tokens: 200, messages: [{ role: "user" as const, content: "Weather?" }] };

  test("when tool_choice names a tool, then the answer is a tool_use block with valid input and stop_reason tool_use", async () => {
    const client = anthropicClient(server.url, caller.key);
    const message = await client.messages.create({
      ...question,
      tools: anthropicTools as any,
      tool_choice: { type: "tool", name: "get_weather" },
    });
    expect(message.stop_reason).toBe("tool_use");
    const block = message.content[0] as { type: string; id: string; name: string; input: unknown };
    expect(block.type).toBe("tool_use");
    expect(block.id).toMatch(/^toolu_[A-Za-z0-9]{24}$/);
    expect(block.name).toBe("get_weather");
    expect(ajv.validate(weatherParams, block.input)).toBe(true);
  });

  test("when tool_choice is any without parallel use and the answer is streamed, then the SDK assembles a valid tool_use from input_json_delta", async () => {
    const client = anthropicClient(server.url, caller.key);
    const stream = client.messages.stream({
      ...question,
      tools: anthropicTools as any,
      tool_choice: { type: "any", disable_parallel_tool_use: true },
    });
    const message = await stream.finalMessage();
    expect(message.stop_reason).toBe("tool_use");
    const block = message.content[0] as { type: string; name: string; input: unknown };
    expect(block.type).toBe("tool_use");
    expect(ajv.validate(paramsOf[block.name], block.input)).toBe(true);
  });

  test("when the history holds tool_use and tool_result blocks, then they are read and count in the prompt", async () => {
    const client = anthropicClient(server.url, caller.key);
    const history = [
      { role: "user" as const, content: "Weather?" },
      {
        role: "assistant" as const,
        content: [
          {
            type: "tool_use" as const,
            id: "toolu_1",
            name: "get_weather",
            input: { city: "Oslo", unit: "celsius", days: 2 },
          },
        ],
      },
      {
        role: "user" as const,
        content: [{ type: "tool_result" as const, tool_use_id: "toolu_1", content: "Snow all week." }],
      },
    ];
    const withResult = await client.messages.create({
      model: CHAT_MODEL,
      max_tokens: 8,
      tools: anthropicTools as any,
      messages: history,
    });
    const without = await client.messages.create({
      model: CHAT_MODEL,
      max_tokens: 8,
      tools: anthropicTools as any,
      messages: history.slice(0, 1),
    });
    expect(withResult.usage.input_tokens).toBeGreaterThan(without.usage.input_tokens + 10);
  });

  test("when tool_choice names a tool not in tools, then 400 names it", async () => {
    const res = await http(server.url, "POST", "/v1/messages", {
      token: caller.key,
      body: { ...question, tools: anthropicTools, tool_choice: { type: "tool", name: "nope" } },
    });
    expectInvalid(res, "tool_choice.name");
  });
});

describe("batch items run the same checks as the synchronous endpoint", () => {
  test("when items offer tools the model cannot serve, a strict schema the grammar cannot enforce, or an unknown tool_choice, then the batch is refused naming each", async () => {
    const strictTool = {
      type: "function",
      function: {
        name: "c",
        strict: true,
        parameters: { type: "object", properties: { c: { type: "string", pattern: "^(?!x)" } } },
      },
    };
    const res = await http(server.url, "POST", "/v1/batches", {
      token: caller.key,
      body: {
        requests: [
          { custom_id: "up", url: "/v1/chat/completions", body: { ...ask, model: "up-chat", tools } },
          {
            custom_id: "strict",
            url: "/v1/chat/completions",
            body: { ...ask, tools: [strictTool], tool_choice: "required" },
          },
          {
            custom_id: "choice",
            url: "/v1/chat/completions",
            body: { ...ask, tools, tool_choice: { type: "function", function: { name: "nope" } } },
          },
          {
            custom_id: "anthropic",
            url: "/v1/messages",
            body: {
              ...ask,
              max_tokens: 10,
              tools: [{ name: "f", input_schema: {} }],
              tool_choice: { type: "tool", name: "g" },
            },
          },
        ],
      },
    });
    expectInvalid(res, "requests[0].body.tools");
    expectInvalid(res, "requests[1].body.tools[0].function.parameters.properties.c.pattern");
    expectInvalid(res, "requests[2].body.tool_choice.function.name");
    expectInvalid(res, "requests[3].body.tool_choice.name");
  });

  test("when an item forces a tool call, then its result row is the call", async () => {
    const created = await http(server.url, "POST", "/v1/batches", {
      token: caller.key,
      body: {
        requests: [
          {
            custom_id: "call",
            url: "/v1/chat/completions",
            body: { ...ask, tools, tool_choice: { type: "function", function: { name: "get_time" } }, max_tokens: 120 },
          },
        ],
      },
    });
    const batch = created.body;
    let done = batch;
    for (let i = 0; i < 300 && !["completed", "failed", "expired", "cancelled"].includes(done.status); i++) {
      await new Promise((r) => setTimeout(r, 100));
      done = (await http(server.url, "GET", `/v1/batches/${batch.id}`, { token: caller.key })).body;
    }
    expect(done.status).toBe("completed");
    const results = await http(server.url, "GET", `/v1/batches/${batch.id}/results.jsonl`, { token: caller.key });
    const row = JSON.parse(results.text.trim().split("\n")[0]);
    expect(row.result_json.choices[0].finish_reason).toBe("tool_calls");
    const call = row.result_json.choices[0].message.tool_calls[0];
    expect(call.function.name).toBe("get_time");
    expect(ajv.validate(timeParams, JSON.parse(call.function.arguments))).toBe(true);
  });
});

describe("Responses function tools", () => {
  const responseTools = [
    { type: "function" as const, name: "get_weather", parameters: weatherParams, strict: true },
    { type: "function" as const, name: "get_time", parameters: timeParams, strict: true },
  ];
  const base = { model: CHAT_MODEL, input: "What is the weather?", max_output_tokens: 200 };

  test("when tool_choice names a function, then the output is a function_call item with valid arguments", async () => {
    const client = openaiClient(server.url, caller.key);
    const response = await client.responses.create({
      ...base,
      tools: responseTools,
      tool_choice: { type: "function", name: "get_weather" },
    });
    expect(response.status).toBe("completed");
    const item = response.output[0] as any;
    expect(item.type).toBe("function_call");
    expect(item.id).toMatch(/^fc_/);
    expect(item.call_id).toMatch(/^call_[A-Za-z0-9]{24}$/);
    expect(item.name).toBe("get_weather");
    expect(ajv.validate(weatherParams, JSON.parse(item.arguments))).toBe(true);
    const gql = await http(server.url, "POST", "/graphql", {
      token: caller.key,
      body: {
        query: "query ($id: ID!) { response(id: $id) { functionCalls { id callId name arguments } } }",
        variables: { id: response.id },
      },
    });
    expect(gql.body.data.response.functionCalls).toEqual([
      { id: item.id, callId: item.call_id, name: item.name, arguments: item.arguments },
    ]);
  });

  test("when a required call is streamed, then the function-call events carry the arguments the final response holds", async () => {
    const client = openaiClient(server.url, caller.key);
    const stream = client.responses.stream({
      ...base,
      tools: responseTools,
      tool_choice: "required",
      parallel_tool_calls: false,
    });
    const types: string[] = [];
    let args = "";
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === "response.function_call_arguments.delta") args += event.delta;
    }
    const final = await stream.finalResponse();
    const item = final.output[0] as any;
    expect(item.type).toBe("function_call");
    expect(args).toBe(item.arguments);
    expect(ajv.validate(paramsOf[item.name], JSON.parse(args))).toBe(true);
    expect(types).toEqual(
      expect.arrayContaining([
        "response.output_item.added",
        "response.function_call_arguments.done",
        "response.completed",
      ]),
    );
    expect(types).not.toContain("response.output_text.delta");
  });

  test("when the input holds a function_call and its function_call_output, then they are read and count in the prompt", async () => {
    const client = openaiClient(server.url, caller.key);
    const call = { type: "function_call" as const, call_id: "call_1", name: "get_time", arguments: '{"zone":"UTC"}' };
    const output = { type: "function_call_output" as const, call_id: "call_1", output: "It is noon." };
    const withResult = await client.responses.create({
      model: CHAT_MODEL,
      max_output_tokens: 8,
      tools: responseTools,
      input: [{ role: "user", content: "Time?" }, call, output],
    });
    const without = await client.responses.create({
      model: CHAT_MODEL,
      max_output_tokens: 8,
      tools: responseTools,
      input: [{ role: "user", content: "Time?" }],
    });
    expect(withResult.usage!.input_tokens).toBeGreaterThan(without.usage!.input_tokens + 10);
  });

  test("when tool_choice names a function not in tools, then 400 names it, in a Responses batch item too", async () => {
    const res = await http(server.url, "POST", "/v1/responses", {
      token: caller.key,
      body: { ...base, tools: responseTools, tool_choice: { type: "function", name: "nope" } },
    });
    expectInvalid(res, "tool_choice.name");
    const batch = await http(server.url, "POST", "/v1/batches", {
      token: caller.key,
      body: {
        requests: [
          {
            url: "/v1/responses",
            body: { ...base, tools: responseTools, tool_choice: { type: "function", name: "nope" } },
          },
        ],
      },
    });
    expectInvalid(batch, "requests[0].body.tool_choice.name");
  });

  test("when a Responses batch item forces a function call after an earlier call and its output, then it runs as the synchronous request would", async () => {
    const call = { type: "function_call", call_id: "call_earlier", name: "get_weather", arguments: '{"city":"Paris"}' };
    const output = { type: "function_call_output", call_id: "call_earlier", output: '{"temp":21}' };
    const created = await http(server.url, "POST", "/v1/batches", {
      token: caller.key,
      body: {
        requests: [
          {
            custom_id: "forced",
            url: "/v1/responses",
            body: {
              ...base,
              tools: responseTools,
              tool_choice: { type: "function", name: "get_weather" },
              input: [{ role: "user", content: "Weather?" }, call, output, { role: "user", content: "And Rome?" }],
            },
          },
        ],
      },
    });
    expect(created.status).toBe(201);
    const results = await batchResults(server.url, caller.key, created.body.id);
    expect(results).toHaveLength(1);
    const [row] = results!;
    expect(row.status).toBe("completed");
    const message = row.result_json.choices[0].message;
    expect(row.result_json.choices[0].finish_reason).toBe("tool_calls");
    expect(message.tool_calls[0].function.name).toBe("get_weather");
    expect(JSON.parse(message.tool_calls[0].function.arguments)).toEqual(expect.any(Object));
    // The earlier call and its output were in the prompt (stored body as converted).
    const [item] = await server.db<{ body_json: any }>("SELECT body_json FROM batch_items WHERE batch_id = $1", [
      created.body.id,
    ]);
    expect(item.body_json.messages.map((m: any) => m.role)).toEqual(["user", "assistant", "tool", "user"]);
    expect(item.body_json.messages[1].tool_calls[0]).toEqual({
      id: "call_earlier",
      type: "function",
      function: { name: "get_weather", arguments: '{"city":"Paris"}' },
    });
    expect(item.body_json.tool_choice).toEqual({ type: "function", function: { name: "get_weather" } });
  });
});
