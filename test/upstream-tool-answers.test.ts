/**
 * What an OpenAI-compatible upstream answers with tools, taken as it comes (issue 26 review,
 * finding 7), against a scripted loopback fake of a vLLM-style server whose next streamed answer
 * each test writes:
 * - tool calls none of which is usable (arguments that are not a JSON object, a name that was not
 *   offered) are a broken answer: 502 in every protocol (an error event once a stream opened),
 *   recorded failed and not charged — never an empty 200;
 * - text beside a call is kept: chat `content` beside `tool_calls`, an Anthropic text block before
 *   the `tool_use`, a Responses message item before the `function_call`, plain and streamed, and
 *   a continued response carries both back upstream;
 * - several calls are answered in order (streamed under their own indexes) where the caller allows
 *   parallel calls; a second call despite `parallel_tool_calls: false` is logged and the first is
 *   answered.
 */
import http, { type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import {
  CHAT_MODEL,
  type TestServer,
  anthropicClient,
  createTestCaller,
  expectEnvelope,
  http as call,
  openaiClient,
  startTestServer,
} from "./support/harness.js";
import { type CapturedLogs, captureLogs } from "./support/log-capture.js";
import { writeEditedCatalog } from "./support/test-catalog.js";

const UPSTREAM_MODEL = "org/fake-tools";
const MODEL = "fake-tools";

/** A streamed `delta.tool_calls` fragment set: one call, its id and name, then its arguments. */
const toolCall = (index: number, name: string, args: string) => [
  { tool_calls: [{ index, id: `up_${index}`, type: "function", function: { name, arguments: "" } }] },
  { tool_calls: [{ index, function: { arguments: args } }] },
];

/** The deltas of the fake's next answer (after the role chunk) and the chat bodies it received. */
const fake = {
  deltas: [] as Array<Record<string, unknown>>,
  bodies: [] as Array<Record<string, any>>,
};

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve) => {
    let text = "";
    req.on("data", (c: Buffer) => (text += c.toString("utf8")));
    req.on("end", () => resolve(text));
  });
}

async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const body = await readBody(req);
  if (req.method === "GET" && req.url === "/v1/models") {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ object: "list", data: [{ id: UPSTREAM_MODEL, object: "model" }] }));
    return;
  }
  if (req.method === "POST" && req.url === "/v1/chat/completions") {
    fake.bodies.push(JSON.parse(body) as Record<string, any>);
    res.writeHead(200, { "content-type": "text/event-stream" });
    const chunk = (delta: Record<string, unknown>, finish: string | null) =>
      `data: ${JSON.stringify({
        id: "c1",
        object: "chat.completion.chunk",
        created: 1,
        model: UPSTREAM_MODEL,
        choices: [{ index: 0, delta, finish_reason: finish }],
      })}\n\n`;
    res.write(chunk({ role: "assistant", content: "" }, null));
    for (const delta of fake.deltas) res.write(chunk(delta, null));
    const calls = fake.deltas.some((d) => d.tool_calls);
    res.write(chunk({}, calls ? "tool_calls" : "stop"));
    const usage = { prompt_tokens: 20, completion_tokens: 9, total_tokens: 29 };
    res.write(`data: ${JSON.stringify({ id: "c1", object: "chat.completion.chunk", choices: [], usage })}\n\n`);
    res.end("data: [DONE]\n\n");
    return;
  }
  res.writeHead(404).end();
}

let upstream: http.Server;
let gateway: TestServer;
let key: string;
let logs: CapturedLogs;

beforeAll(async () => {
  upstream = http.createServer((req, res) => void handle(req, res));
  await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve));
  const port = (upstream.address() as AddressInfo).port;
  const catalogPath = writeEditedCatalog((c) => {
    const chat = c.models.find((m) => m.id === CHAT_MODEL)!;
    c.models.push({
      ...structuredClone(chat),
      id: MODEL,
      display_name: MODEL,
      context_tokens: 4096,
      capabilities: { ...(chat.capabilities as object), tools: true },
      engine: { type: "openai_compatible", upstream_model: UPSTREAM_MODEL },
    });
  });
  logs = captureLogs("info");
  gateway = await startTestServer(
    {
      catalogPath,
      upstreams: [{ name: "fake", base_url: `http://127.0.0.1:${port}/v1`, models: [UPSTREAM_MODEL] }],
    },
    undefined,
    { logger: logs.logger },
  );
  key = (await createTestCaller(gateway.url)).key;
}, 60_000);

afterAll(async () => {
  await gateway?.close();
  await new Promise((resolve) => upstream?.close(resolve));
});

const timeParams = { type: "object", properties: { zone: { type: "string" } }, required: ["zone"] };
const chatTools = [{ type: "function" as const, function: { name: "get_time", parameters: timeParams } }];
const messagesTools = [{ name: "get_time", input_schema: timeParams as any }];
const responseTools = [{ type: "function" as const, name: "get_time", parameters: timeParams, strict: false }];
const chatBody = (extra: Record<string, unknown> = {}) => ({
  model: MODEL,
  messages: [{ role: "user", content: "What time is it?" }],
  tools: chatTools,
  max_tokens: 50,
  ...extra,
});

/** The newest activity row of the gateway. */
async function lastActivity(): Promise<{ status: string; cost: string; error: any }> {
  const [row] = await gateway.db<{ status: string; cost: string; error: any }>(
    `SELECT status, cost_micros::text AS cost, error_json AS error FROM activity
      WHERE model = $1 ORDER BY created_at DESC, id DESC LIMIT 1`,
    [MODEL],
  );
  return row;
}

describe("an upstream answer whose tool calls are all unusable", () => {
  const garbage: Array<[string, Array<Record<string, unknown>>]> = [
    ["arguments that are not JSON", toolCall(0, "get_time", "{not json")],
    ["a name that was not offered", toolCall(0, "rm_rf", '{"path":"/"}')],
  ];

  test.each(garbage)(
    "when the upstream answers a call with %s, then chat auto and required answer 502, recorded failed and not charged",
    async (_what, deltas) => {
      fake.deltas = deltas;
      for (const tool_choice of ["auto", "required"]) {
        const res = await call(gateway.url, "POST", "/v1/chat/completions", {
          token: key,
          body: chatBody({ tool_choice }),
        });
        expectEnvelope(res, 502);
        expect(res.body.detail).toContain("tool calls");
        expect(await lastActivity()).toEqual({
          status: "failed",
          cost: "0",
          error: expect.objectContaining({ code: "engine_failure" }),
        });
      }
    },
  );

  test("when the upstream answers an unusable call to Anthropic any and to Responses, then 502 in their dialects", async () => {
    fake.deltas = toolCall(0, "get_time", "{not json");
    const message = await call(gateway.url, "POST", "/v1/messages", {
      token: key,
      body: {
        model: MODEL,
        max_tokens: 50,
        tools: messagesTools,
        tool_choice: { type: "any" },
        messages: [{ role: "user", content: "What time is it?" }],
      },
    });
    expectEnvelope(message, 502);
    expect(message.body.type).toBe("error");
    const response = await call(gateway.url, "POST", "/v1/responses", {
      token: key,
      body: { model: MODEL, input: "What time is it?", tools: responseTools, tool_choice: "required" },
    });
    expectEnvelope(response, 502);
    expect((await lastActivity()).status).toBe("failed");
  });

  test("when the answer was streamed, then the stream ends with an error event and is recorded failed", async () => {
    fake.deltas = toolCall(0, "rm_rf", "{}");
    const res = await call(gateway.url, "POST", "/v1/chat/completions", {
      token: key,
      body: chatBody({ stream: true }),
    });
    expect(res.status).toBe(200);
    const events = res.text
      .split("\n\n")
      .filter((e) => e.startsWith("data: ") && e !== "data: [DONE]")
      .map((e) => JSON.parse(e.slice(6)));
    expect(events.at(-1)).toMatchObject({ status_code: 502 });
    expect(events.some((e) => e.choices?.[0]?.finish_reason)).toBe(false);
    expect(await lastActivity()).toMatchObject({ status: "failed", cost: "0" });
  });
});

describe("an upstream answer with text beside its call", () => {
  const deltas = () => [{ content: "Let me " }, { content: "check." }, ...toolCall(0, "get_time", '{"zone":"UTC"}')];

  test("when chat is answered, then content and tool_calls come together, plain and streamed", async () => {
    fake.deltas = deltas();
    const client = openaiClient(gateway.url, key);
    const completion = await client.chat.completions.create(chatBody() as any);
    const choice = completion.choices[0];
    expect(choice.finish_reason).toBe("tool_calls");
    expect(choice.message.content).toBe("Let me check.");
    expect(choice.message.tool_calls).toHaveLength(1);
    expect((choice.message.tool_calls![0] as any).function).toEqual({ name: "get_time", arguments: '{"zone":"UTC"}' });

    fake.deltas = deltas();
    const stream = client.chat.completions.stream(chatBody() as any);
    const streamed = (await stream.finalChatCompletion()).choices[0];
    expect(streamed.message.content).toBe("Let me check.");
    expect((streamed.message.tool_calls![0] as any).function.name).toBe("get_time");
    expect(streamed.finish_reason).toBe("tool_calls");
  });

  test("when Anthropic is answered, then a text block comes before the tool_use, plain and streamed", async () => {
    const client = anthropicClient(gateway.url, key);
    const body = {
      model: MODEL,
      max_tokens: 50,
      tools: messagesTools,
      messages: [{ role: "user" as const, content: "What time is it?" }],
    };
    fake.deltas = deltas();
    const message = await client.messages.create(body);
    expect(message.stop_reason).toBe("tool_use");
    expect(message.content.map((b) => b.type)).toEqual(["text", "tool_use"]);
    expect((message.content[0] as any).text).toBe("Let me check.");
    expect((message.content[1] as any).input).toEqual({ zone: "UTC" });

    fake.deltas = deltas();
    const streamed = await client.messages.stream(body).finalMessage();
    expect(streamed.content.map((b) => b.type)).toEqual(["text", "tool_use"]);
    expect((streamed.content[0] as any).text).toBe("Let me check.");
    expect((streamed.content[1] as any).input).toEqual({ zone: "UTC" });
    expect(streamed.stop_reason).toBe("tool_use");
  });

  test("when Responses is answered, then a message item comes before the function_call, plain and streamed, and both go back upstream when it is continued", async () => {
    const client = openaiClient(gateway.url, key);
    const body = { model: MODEL, input: "What time is it?", tools: responseTools };
    fake.deltas = deltas();
    const response = await client.responses.create(body);
    expect(response.output.map((i) => i.type)).toEqual(["message", "function_call"]);
    expect(response.output_text).toBe("Let me check.");

    fake.deltas = deltas();
    const events: any[] = [];
    for await (const event of await client.responses.create({ ...body, stream: true })) events.push(event);
    const added = events.filter((e) => e.type === "response.output_item.added");
    expect(added.map((e) => [e.output_index, e.item.type])).toEqual([
      [0, "message"],
      [1, "function_call"],
    ]);
    const completed = events.at(-1);
    expect(completed.type).toBe("response.completed");
    expect(completed.response.output.map((i: any) => i.type)).toEqual(["message", "function_call"]);

    const fc = response.output[1] as { call_id: string };
    fake.deltas = [{ content: "Noon it is." }];
    await client.responses.create({
      ...body,
      previous_response_id: response.id,
      input: [{ type: "function_call_output", call_id: fc.call_id, output: "12:00" }],
    });
    expect(fake.bodies.at(-1)!.messages.slice(1)).toEqual([
      {
        role: "assistant",
        content: "Let me check.",
        tool_calls: [{ id: fc.call_id, type: "function", function: { name: "get_time", arguments: '{"zone":"UTC"}' } }],
      },
      { role: "tool", tool_call_id: fc.call_id, content: "12:00" },
    ]);
  });
});

describe("an upstream answer with two calls", () => {
  test("when the caller allows parallel calls (the default), then both are answered in order, plain and streamed under indexes 0 and 1", async () => {
    fake.deltas = [
      { content: "Both." },
      ...toolCall(0, "get_time", '{"zone":"UTC"}'),
      ...toolCall(1, "get_time", '{"zone":"CET"}'),
    ];
    const client = openaiClient(gateway.url, key);
    const completion = await client.chat.completions.create(chatBody() as any);
    expect(fake.bodies.at(-1)!.parallel_tool_calls).toBe(true);
    const message = completion.choices[0].message as any;
    expect(message.content).toBe("Both.");
    expect(message.tool_calls.map((c: any) => c.function.arguments)).toEqual(['{"zone":"UTC"}', '{"zone":"CET"}']);
    expect(new Set(message.tool_calls.map((c: any) => c.id)).size).toBe(2);
    const stream = await client.chat.completions.create(chatBody({ stream: true }) as any);
    const order: string[] = [];
    for await (const chunk of stream as any) {
      const delta = chunk.choices[0]?.delta ?? {};
      if (delta.content) order.push("text");
      for (const f of delta.tool_calls ?? []) order.push(f.id ? `call ${f.index}` : `args ${f.index}`);
    }
    expect(order).toEqual(["text", "call 0", "args 0", "call 1", "args 1"]);
    const messages = await anthropicClient(gateway.url, key).messages.create({
      model: MODEL,
      max_tokens: 50,
      messages: [{ role: "user", content: "What time is it?" }],
      tools: messagesTools,
    });
    expect(messages.content.map((b) => b.type)).toEqual(["text", "tool_use", "tool_use"]);
    const response = await client.responses.create({ model: MODEL, input: "What time is it?", tools: responseTools });
    expect(response.output.map((i) => i.type)).toEqual(["message", "function_call", "function_call"]);
  });

  test("when parallel_tool_calls is false and two calls come, then the first is answered and the second is logged", async () => {
    fake.deltas = [...toolCall(0, "get_time", '{"zone":"UTC"}'), ...toolCall(1, "get_time", '{"zone":"CET"}')];
    const from = logs.lines.length;
    const completion = await openaiClient(gateway.url, key).chat.completions.create(
      chatBody({ parallel_tool_calls: false }) as any,
    );
    expect(fake.bodies.at(-1)!.parallel_tool_calls).toBe(false);
    const calls = completion.choices[0].message.tool_calls!;
    expect(calls).toHaveLength(1);
    expect((calls[0] as any).function.arguments).toBe('{"zone":"UTC"}');
    const warned = logs.records(from).filter((r) => /parallel_tool_calls/.test(r.msg));
    expect(warned).toEqual([expect.objectContaining({ level: 40, calls: 2, endpoint: "fake" })]);
  });
});
