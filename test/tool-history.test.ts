/**
 * The tool turns of a history are checked in every protocol (issue 26 review, finding 14), as
 * OpenAI and Anthropic check them (and as an OpenAI-compatible upstream would): an answer that
 * names no call before it, a call id used twice, a call left unanswered before the next turn (chat,
 * Messages) or at all (Responses, the `previous_response_id` conversation included) is a 400
 * naming the field in the caller's protocol, for synchronous, background and batch requests alike.
 */
import {
  CHAT_MODEL,
  type TestServer,
  createTestCaller,
  expectInvalid,
  http,
  openaiClient,
  startTestServer,
} from "./support/harness.js";
import { writeEditedCatalog } from "./support/test-catalog.js";

let server: TestServer;
let key: string;

beforeAll(async () => {
  // Tool definitions take hundreds of the tiny tokenizer's tokens: a context of 2,048 holds them.
  const catalog = writeEditedCatalog((c) => {
    const chat = c.models.find((m) => m.id === CHAT_MODEL)!;
    (chat.engine as { context_size?: number }).context_size = 2048;
  });
  server = await startTestServer({ catalogPath: catalog });
  key = (await createTestCaller(server.url)).key;
});
afterAll(() => server.close());

const post = (path: string, body: unknown) => http(server.url, "POST", path, { token: key, body });
const fields = (res: { body: any }) => (res.body.extra as Array<{ field: string }>).map((i) => i.field).sort();

const timeParams = { type: "object", properties: { zone: { type: "string", maxLength: 10 } }, required: ["zone"] };

describe("Chat Completions", () => {
  const call = (id: string) => ({ id, type: "function", function: { name: "get_time", arguments: '{"zone":"UTC"}' } });
  const chat = (messages: unknown[]) => ({ model: CHAT_MODEL, max_tokens: 4, messages });
  const user = { role: "user", content: "Time?" };
  const answer = (id: string) => ({ role: "tool", tool_call_id: id, content: "Noon." });

  test("when every call is answered right after its turn, then 200", async () => {
    const res = await post(
      "/v1/chat/completions",
      chat([user, { role: "assistant", content: null, tool_calls: [call("a"), call("b")] }, answer("b"), answer("a")]),
    );
    expect(res.status).toBe(200);
  });

  test("when a tool message answers no call of the message before it, then 400 names its tool_call_id", async () => {
    const alone = await post("/v1/chat/completions", chat([user, answer("call_x")]));
    expectInvalid(alone, "messages[1].tool_call_id");
    expect(alone.body.detail).toContain("call_x");
    const other = await post(
      "/v1/chat/completions",
      chat([user, { role: "assistant", content: null, tool_calls: [call("a")] }, answer("a"), answer("b")]),
    );
    expect(fields(other)).toEqual(["messages[3].tool_call_id"]);
    // An answer after a later user turn answers nothing before it either.
    const late = await post(
      "/v1/chat/completions",
      chat([user, { role: "assistant", content: null, tool_calls: [call("a")] }, user, answer("a")]),
    );
    expect(fields(late)).toEqual(["messages[1].tool_calls[0].id", "messages[3].tool_call_id"]);
  });

  test("when a tool call id is used twice, then 400 names the second", async () => {
    const twice = await post(
      "/v1/chat/completions",
      chat([user, { role: "assistant", content: null, tool_calls: [call("a"), call("a")] }, answer("a")]),
    );
    expect(fields(twice)).toEqual(["messages[1].tool_calls[1].id"]);
    const again = await post(
      "/v1/chat/completions",
      chat([
        user,
        { role: "assistant", content: null, tool_calls: [call("a")] },
        answer("a"),
        { role: "assistant", content: null, tool_calls: [call("a")] },
        answer("a"),
      ]),
    );
    expect(fields(again)).toEqual(["messages[3].tool_calls[0].id"]);
  });

  test("when an assistant's tool calls are not all answered before the next message or the end, then 400 names each", async () => {
    const next = await post(
      "/v1/chat/completions",
      chat([user, { role: "assistant", content: null, tool_calls: [call("a"), call("b")] }, answer("a"), user]),
    );
    expectInvalid(next, "messages[1].tool_calls[1].id");
    expect(fields(next)).toEqual(["messages[1].tool_calls[1].id"]);
    const end = await post(
      "/v1/chat/completions",
      chat([user, { role: "assistant", content: null, tool_calls: [call("a")] }]),
    );
    expect(fields(end)).toEqual(["messages[1].tool_calls[0].id"]);
  });

  test("when a batch item's history does not pair, then the batch is refused naming the item's field", async () => {
    const res = await post("/v1/batches", {
      requests: [{ url: "/v1/chat/completions", body: chat([user, answer("call_x")]) }],
    });
    expectInvalid(res, "requests[0].body.messages[1].tool_call_id");
  });
});

describe("Anthropic Messages", () => {
  const tools = [{ name: "get_time", input_schema: timeParams }];
  const message = (messages: unknown[]) => ({ model: CHAT_MODEL, max_tokens: 4, tools, messages });
  const user = { role: "user", content: "Time?" };
  const use = (id: string) => ({ type: "tool_use", id, name: "get_time", input: { zone: "UTC" } });
  const result = (id: string) => ({ type: "tool_result", tool_use_id: id, content: "Noon." });

  test("when every tool_use is answered in the next message, results first, then 200", async () => {
    const res = await post(
      "/v1/messages",
      message([
        user,
        { role: "assistant", content: [use("toolu_a"), use("toolu_b")] },
        { role: "user", content: [result("toolu_b"), result("toolu_a"), { type: "text", text: "And?" }] },
      ]),
    );
    expect(res.status).toBe(200);
  });

  test("when a tool_result names no tool_use of the message before it, then 400 names its tool_use_id", async () => {
    const res = await post(
      "/v1/messages",
      message([
        user,
        { role: "assistant", content: [use("toolu_a")] },
        { role: "user", content: [result("toolu_a"), result("toolu_x")] },
      ]),
    );
    expectInvalid(res, "messages[2].content[1].tool_use_id");
    expect(fields(res)).toEqual(["messages[2].content[1].tool_use_id"]);
    expect(res.body.type).toBe("error");
  });

  test("when a tool_use has no tool_result in the next message, or its result comes after text, then 400 names it", async () => {
    const none = await post(
      "/v1/messages",
      message([user, { role: "assistant", content: [use("toolu_a")] }, { role: "user", content: "Go on" }]),
    );
    expect(fields(none)).toEqual(["messages[1].content[0].id"]);
    const after = await post(
      "/v1/messages",
      message([
        user,
        { role: "assistant", content: [{ type: "text", text: "Let me see." }, use("toolu_a")] },
        { role: "user", content: [{ type: "text", text: "Here:" }, result("toolu_a")] },
      ]),
    );
    expect(fields(after)).toEqual(["messages[1].content[1].id", "messages[2].content[1].tool_use_id"]);
  });

  test("when a tool_use id is used twice, then 400 names the second; in a batch item too", async () => {
    const body = message([
      user,
      { role: "assistant", content: [use("toolu_a"), use("toolu_a")] },
      { role: "user", content: [result("toolu_a")] },
    ]);
    expect(fields(await post("/v1/messages", body))).toEqual(["messages[1].content[1].id"]);
    const batch = await post("/v1/batches", { requests: [{ url: "/v1/messages", body }] });
    expectInvalid(batch, "requests[0].body.messages[1].content[1].id");
  });
});

describe("Responses", () => {
  const tools = [{ type: "function", name: "get_time", parameters: timeParams }];
  const base = { model: CHAT_MODEL, max_output_tokens: 4, tools };
  const user = { role: "user", content: "Time?" };
  const fc = (id: string) => ({ type: "function_call", call_id: id, name: "get_time", arguments: '{"zone":"UTC"}' });
  const out = (id: string) => ({ type: "function_call_output", call_id: id, output: "Noon." });

  test("when a function_call_output matches no earlier function_call, then 400 names its call_id", async () => {
    const res = await post("/v1/responses", { ...base, input: [user, fc("a"), out("a"), out("b")] });
    expect(fields(res)).toEqual(["input[3].call_id"]);
    const before = await post("/v1/responses", { ...base, input: [user, out("a"), fc("a")] });
    // Before its call it answers nothing, and the call after it is left unanswered.
    expect(fields(before)).toEqual(["input[1].call_id", "input[2].call_id"]);
  });

  test("when a function_call has no output, or a call_id is used twice, then 400 names it; in a batch item too", async () => {
    const missing = await post("/v1/responses", { ...base, input: [user, fc("a"), fc("b"), out("a")] });
    expect(fields(missing)).toEqual(["input[2].call_id"]);
    const twice = await post("/v1/responses", { ...base, input: [user, fc("a"), out("a"), fc("a"), out("a")] });
    expect(fields(twice)).toEqual(["input[3].call_id"]);
    const batch = await post("/v1/batches", {
      requests: [{ url: "/v1/responses", body: { ...base, input: [user, out("a")] } }],
    });
    expectInvalid(batch, "requests[0].body.input[1].call_id");
  });

  test("when a response that called a function is continued, then only its output for that call_id answers it (sync, background, batch)", async () => {
    const client = openaiClient(server.url, key);
    const called = await client.responses.create({
      model: CHAT_MODEL,
      max_output_tokens: 200,
      input: "What time is it?",
      tools: tools as any,
      tool_choice: { type: "function", name: "get_time" },
    });
    const item = called.output[0] as { type: string; call_id: string };
    expect(item.type).toBe("function_call");
    const continued = { ...base, previous_response_id: called.id };

    const ok = await post("/v1/responses", { ...continued, input: [out(item.call_id)] });
    expect(ok.status).toBe(200);

    // An output for another id answers nothing, and the conversation's call stays unanswered.
    const wrong = await post("/v1/responses", { ...continued, input: [out("call_other")] });
    expect(fields(wrong)).toEqual(["input[0].call_id", "previous_response_id"]);
    expect(wrong.body.extra.find((i: any) => i.field === "previous_response_id").message).toContain(item.call_id);
    // A new message without the output (OpenAI: "No tool output found for function call").
    const skipped = await post("/v1/responses", { ...continued, input: "What now?" });
    expect(fields(skipped)).toEqual(["previous_response_id"]);
    const background = await post("/v1/responses", { ...continued, input: "What now?", background: true });
    expectInvalid(background, "previous_response_id");
    const batch = await post("/v1/batches", {
      requests: [
        { url: "/v1/responses", body: { ...continued, input: [out("call_other")] } },
        { url: "/v1/responses", body: { ...continued, input: [out(item.call_id)] } },
      ],
    });
    expect(fields(batch)).toEqual(["requests[0].body.input[0].call_id", "requests[0].body.previous_response_id"]);
  });
});
