/**
 * `POST /v1/messages` (Anthropic Messages) through the official `@anthropic-ai/sdk` client and raw
 * HTTP, on the real tinystories model: the message object, max tokens, stop sequences, system
 * prompts, the SSE event sequence, `?beta=true`, credentials, the error envelope, and metering.
 */
import Anthropic from "@anthropic-ai/sdk";
import type { Message, RawMessageStreamEvent } from "@anthropic-ai/sdk/resources/messages";
import {
  CHAT_MODEL,
  EMBED_MODEL,
  type TestServer,
  anthropicClient,
  createTestCaller,
  expectEnvelope,
  expectInvalid,
  http,
  startTestServer,
} from "./support/harness.js";

let server: TestServer;
let caller: Awaited<ReturnType<typeof createTestCaller>>;
let client: Anthropic;

const STORY = "Once upon a time";
/**
 * Greedy decoding. `@anthropic-ai/sdk` 1.x no longer types the sampling parameters, but sends
 * them, and the Messages API (and Switchyard) still takes them; a spread skips the type check.
 */
const GREEDY = { temperature: 0 };
const user = (content: string) => [{ role: "user" as const, content }];

beforeAll(async () => {
  server = await startTestServer();
  caller = await createTestCaller(server.url);
  client = anthropicClient(server.url, caller.key);
});
afterAll(() => server.close());

function textOf(message: Message): string {
  expect(message.content).toHaveLength(1);
  const block = message.content[0];
  if (block.type !== "text") throw new Error(`expected a text block, got ${block.type}`);
  return block.text;
}

/** The activity id behind a message id (`msg_` + the request UUID without dashes). */
function activityId(messageId: string): string {
  const hex = messageId.replace(/^msg_/, "");
  expect(hex).toMatch(/^[0-9a-f]{32}$/);
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** Raw SSE frames of a streamed response: `[event, data]` pairs. */
function sseFrames(text: string): Array<{ event: string; data: any }> {
  return text
    .split("\n\n")
    .filter((chunk) => chunk.trim().length > 0)
    .map((chunk) => {
      const lines = chunk.split("\n");
      const event = lines.find((l) => l.startsWith("event: "))?.slice("event: ".length) ?? "";
      const data = lines
        .filter((l) => l.startsWith("data: "))
        .map((l) => l.slice("data: ".length))
        .join("\n");
      return { event, data: JSON.parse(data) };
    });
}

const EVENT_ORDER =
  /^message_start content_block_start (ping )*(content_block_delta )+content_block_stop message_delta message_stop$/;

describe("POST /v1/messages: the message object", () => {
  test("when a plain message is created with the SDK, then it answers an assistant message with text and usage", async () => {
    const message = await client.messages.create({ model: CHAT_MODEL, max_tokens: 20, messages: user(STORY) });
    expect(message.id).toMatch(/^msg_[0-9a-f]{32}$/);
    expect(message.type).toBe("message");
    expect(message.role).toBe("assistant");
    expect(message.model).toBe(CHAT_MODEL);
    expect(message.content[0]).toEqual({ type: "text", text: expect.any(String) });
    expect(textOf(message).length).toBeGreaterThan(0);
    expect(["end_turn", "max_tokens"]).toContain(message.stop_reason);
    expect(message.stop_sequence).toBeNull();
    expect(message.usage.input_tokens).toBeGreaterThan(0);
    expect(message.usage.output_tokens).toBeGreaterThan(0);
    expect(message.usage.output_tokens).toBeLessThanOrEqual(20);
    expect(message.usage.cache_creation_input_tokens).toBe(0);
    expect(message.usage.cache_read_input_tokens).toBeGreaterThanOrEqual(0);
  });

  test("when max_tokens is small, then stop_reason is max_tokens and output_tokens equals max_tokens", async () => {
    for (const maxTokens of [1, 7]) {
      const message = await client.messages.create({
        model: CHAT_MODEL,
        max_tokens: maxTokens,
        ...GREEDY,
        messages: user(STORY),
      });
      expect(message.stop_reason).toBe("max_tokens");
      expect(message.stop_sequence).toBeNull();
      expect(message.usage.output_tokens).toBe(maxTokens);
      expect(textOf(message).length).toBeGreaterThan(0);
    }
  });

  test("when the model ends its story before max_tokens, then stop_reason is end_turn, also in the stream", async () => {
    // Greedy decoding of this prompt ends with the end-of-story token after ~240 tokens.
    const params = { model: CHAT_MODEL, max_tokens: 400, ...GREEDY, messages: user("One day") };
    const message = await client.messages.create(params);
    expect(message.stop_reason).toBe("end_turn");
    expect(message.stop_sequence).toBeNull();
    expect(message.usage.output_tokens).toBeLessThan(400);
    const streamed = await client.messages.stream(params).finalMessage();
    expect(streamed.stop_reason).toBe("end_turn");
    expect(textOf(streamed)).toBe(textOf(message));
    expect(streamed.usage.output_tokens).toBe(message.usage.output_tokens);
  });

  test("when temperature is 0, then the same request gives the same text twice", async () => {
    const params = { model: CHAT_MODEL, max_tokens: 30, ...GREEDY, messages: user("The little dog") };
    const first = await client.messages.create(params);
    const second = await client.messages.create(params);
    expect(textOf(second)).toBe(textOf(first));
    expect(second.id).not.toBe(first.id);
  });

  test("when the same prompt is sent again, then its prefix is read from cache and the input totals agree", async () => {
    const params = { model: CHAT_MODEL, max_tokens: 5, ...GREEDY, messages: user("A big red ball rolled away") };
    const first = await client.messages.create(params);
    const second = await client.messages.create(params);
    const total = (m: Message) => m.usage.input_tokens + (m.usage.cache_read_input_tokens ?? 0);
    expect(total(second)).toBe(total(first));
    expect(second.usage.cache_read_input_tokens).toBeGreaterThan(0);
    expect(second.usage.input_tokens).toBeGreaterThan(0);
  });

  test("when a system prompt is given as a string or as text blocks, then it is accepted and counted as input", async () => {
    const base = { model: CHAT_MODEL, max_tokens: 5, ...GREEDY, messages: user(STORY) };
    const total = (m: Message) => m.usage.input_tokens + (m.usage.cache_read_input_tokens ?? 0);
    const plain = await client.messages.create(base);
    const system = "You tell short happy stories about animals.";
    const withString = await client.messages.create({ ...base, system });
    const withBlocks = await client.messages.create({ ...base, system: [{ type: "text", text: system }] });
    expect(total(withString)).toBeGreaterThan(total(plain));
    expect(total(withBlocks)).toBe(total(withString));
    expect(textOf(withBlocks)).toBe(textOf(withString));
  });

  test("when the conversation has several turns with text blocks, then it is accepted", async () => {
    const message = await client.messages.create({
      model: CHAT_MODEL,
      max_tokens: 8,
      messages: [
        { role: "user", content: [{ type: "text", text: "Tom had a red ball." }] },
        { role: "assistant", content: "He liked to play with it." },
        { role: "user", content: "One day" },
      ],
    });
    expect(textOf(message).length).toBeGreaterThan(0);
    expect(message.usage.output_tokens).toBeGreaterThan(0);
  });

  test("when the SDK's beta namespace is used, with and without ?beta=true, then the message is created", async () => {
    const params = { model: CHAT_MODEL, max_tokens: 6, ...GREEDY, messages: user(STORY) };
    const beta = await client.beta.messages.create(params);
    const query = await client.beta.messages.create(params, { query: { beta: "true" } });
    expect(beta.type).toBe("message");
    expect(query.type).toBe("message");
    expect(query.content).toEqual(beta.content);

    const raw = await http(server.url, "POST", "/v1/messages?beta=true", {
      headers: { "x-api-key": caller.key, "anthropic-version": "2023-06-01" },
      body: params,
    });
    expect(raw.status).toBe(200);
    expect(raw.body.type).toBe("message");
    expectInvalid(
      await http(server.url, "POST", "/v1/messages?beta=maybe", { token: caller.key, body: params }),
      "beta",
    );
    // An empty value is refused, as for every query parameter (issue 28, item 4).
    expectInvalid(await http(server.url, "POST", "/v1/messages?beta=", { token: caller.key, body: params }), "beta");
  });

  test("when the answer is sent, then it carries x-switchyard-overhead-ms", async () => {
    const { data, response } = await client.messages
      .create({ model: CHAT_MODEL, max_tokens: 4, messages: user(STORY) })
      .withResponse();
    expect(data.type).toBe("message");
    const overhead = Number(response.headers.get("x-switchyard-overhead-ms"));
    expect(response.headers.get("x-switchyard-overhead-ms")).not.toBeNull();
    expect(Number.isFinite(overhead)).toBe(true);
    expect(overhead).toBeGreaterThanOrEqual(0);
  });
});

describe("POST /v1/messages: stop sequences", () => {
  let greedy: string;
  /** Two stop strings the model really emits with temperature 0, the earlier one first. */
  let earlier: string;
  let later: string;
  const params = { model: CHAT_MODEL, max_tokens: 60, ...GREEDY, messages: user(STORY) };

  beforeAll(async () => {
    greedy = textOf(await client.messages.create(params));
    const words = [...new Set(greedy.split(/[^A-Za-z]+/).filter((w) => w.length >= 3))];
    const firstAt = (w: string) => greedy.indexOf(` ${w}`);
    const candidates = words.filter((w) => firstAt(w) > 0).sort((a, b) => firstAt(a) - firstAt(b));
    expect(candidates.length).toBeGreaterThanOrEqual(6);
    earlier = ` ${candidates[2]}`;
    later = ` ${candidates[5]}`;
  });

  test("when a stop sequence the model emits is given, then the text stops before it and stop_sequence names it", async () => {
    const message = await client.messages.create({ ...params, stop_sequences: [later] });
    expect(message.stop_reason).toBe("stop_sequence");
    expect(message.stop_sequence).toBe(later);
    expect(textOf(message)).toBe(greedy.slice(0, greedy.indexOf(later)));
    expect(textOf(message)).not.toContain(later);
  });

  test("when several stop sequences are given, then the first one emitted ends the text", async () => {
    const message = await client.messages.create({ ...params, stop_sequences: [later, earlier] });
    expect(message.stop_reason).toBe("stop_sequence");
    expect(message.stop_sequence).toBe(earlier);
    expect(textOf(message)).toBe(greedy.slice(0, greedy.indexOf(earlier)));
  });

  test("when the stop sequence never appears, then generation runs to max_tokens", async () => {
    const message = await client.messages.create({ ...params, stop_sequences: ["zebra-xylophone"] });
    expect(message.stop_reason).toBe("max_tokens");
    expect(message.stop_sequence).toBeNull();
    expect(textOf(message)).toBe(greedy);
  });

  test("when a stream hits a stop sequence, then no delta carries it and message_delta names it", async () => {
    const stream = client.messages.stream({ ...params, stop_sequences: [later] });
    const deltas: string[] = [];
    stream.on("text", (text) => deltas.push(text));
    const final = await stream.finalMessage();
    const expected = greedy.slice(0, greedy.indexOf(later));
    expect(deltas.join("")).toBe(expected);
    expect(final.stop_reason).toBe("stop_sequence");
    expect(final.stop_sequence).toBe(later);
    expect(textOf(final)).toBe(expected);
  });
});

describe("POST /v1/messages: streaming", () => {
  test("when create({stream: true}) is used, then the events come in the Anthropic order with usage", async () => {
    const stream = await client.messages.create({
      model: CHAT_MODEL,
      max_tokens: 12,
      ...GREEDY,
      messages: user(STORY),
      stream: true,
    });
    const events: RawMessageStreamEvent[] = [];
    for await (const event of stream) events.push(event);
    expect(events.map((e) => e.type).join(" ")).toMatch(EVENT_ORDER);

    const start = events[0];
    if (start.type !== "message_start") throw new Error("first event is not message_start");
    expect(start.message.id).toMatch(/^msg_[0-9a-f]{32}$/);
    expect(start.message.role).toBe("assistant");
    expect(start.message.model).toBe(CHAT_MODEL);
    expect(start.message.content).toEqual([]);
    expect(start.message.stop_reason).toBeNull();
    expect(start.message.usage.input_tokens).toBeGreaterThan(0);

    const blockStart = events.find((e) => e.type === "content_block_start");
    expect(blockStart).toEqual({ type: "content_block_start", index: 0, content_block: { type: "text", text: "" } });

    const deltas = events.filter((e) => e.type === "content_block_delta");
    for (const d of deltas) expect(d).toEqual({ type: "content_block_delta", index: 0, delta: expect.any(Object) });
    const text = deltas.map((d) => (d.delta.type === "text_delta" ? d.delta.text : "")).join("");
    expect(text.length).toBeGreaterThan(0);

    const messageDelta = events.find((e) => e.type === "message_delta");
    if (messageDelta?.type !== "message_delta") throw new Error("no message_delta");
    expect(messageDelta.delta.stop_reason).toBe("max_tokens");
    expect(messageDelta.delta.stop_sequence).toBeNull();
    expect(messageDelta.usage.output_tokens).toBe(12);

    // The streamed text is what the same greedy request answers without streaming.
    const plain = await client.messages.create({
      model: CHAT_MODEL,
      max_tokens: 12,
      ...GREEDY,
      messages: user(STORY),
    });
    expect(text).toBe(textOf(plain));
  });

  test("when messages.stream() is used, then the text events, finalText and finalMessage agree", async () => {
    const stream = client.messages.stream({ model: CHAT_MODEL, max_tokens: 25, messages: user("The cat") });
    const deltas: string[] = [];
    const types: string[] = [];
    stream.on("text", (text) => deltas.push(text));
    stream.on("streamEvent", (event) => types.push(event.type));
    const final = await stream.finalMessage();
    const finalText = await stream.finalText();
    expect(types.join(" ")).toMatch(EVENT_ORDER);
    expect(deltas.length).toBeGreaterThan(0);
    expect(deltas.join("")).toBe(textOf(final));
    expect(finalText).toBe(textOf(final));
    expect(final.id).toMatch(/^msg_[0-9a-f]{32}$/);
    expect(final.usage.output_tokens).toBeGreaterThan(0);
    expect(final.usage.output_tokens).toBeLessThanOrEqual(25);
    expect(final.usage.input_tokens).toBeGreaterThan(0);
  });

  test("when streamed over raw HTTP, then each frame names its event, the headers are SSE, and the request is metered", async () => {
    const fresh = await createTestCaller(server.url);
    const res = await http(server.url, "POST", "/v1/messages", {
      headers: { "x-api-key": fresh.key },
      body: { model: CHAT_MODEL, max_tokens: 10, stream: true, messages: user(STORY) },
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
    expect(res.headers.get("x-switchyard-overhead-ms")).not.toBeNull();
    const frames = sseFrames(res.text);
    for (const f of frames) expect(f.data.type).toBe(f.event);
    expect(frames.map((f) => f.event).join(" ")).toMatch(EVENT_ORDER);

    const start = frames[0].data.message;
    const last = frames.find((f) => f.event === "message_delta")!.data;
    const rows = await server.db<any>("SELECT * FROM activity WHERE team_id = $1", [fresh.teamId]);
    expect(rows).toHaveLength(1);
    expect(rows[0].id).toBe(activityId(start.id));
    expect(rows[0].status).toBe("completed");
    expect(rows[0].endpoint).toBe("/v1/messages");
    expect(rows[0].completion_tokens).toBe(last.usage.output_tokens);
    expect(rows[0].prompt_tokens).toBe(start.usage.input_tokens + start.usage.cache_read_input_tokens);
    expect(rows[0].result_json.content[0].text).toBe(
      frames
        .filter((f) => f.event === "content_block_delta")
        .map((f) => f.data.delta.text)
        .join(""),
    );
  });
});

describe("POST /v1/messages: credentials", () => {
  test("when the key comes as x-api-key or as a bearer token, then both are accepted", async () => {
    const body = { model: CHAT_MODEL, max_tokens: 3, messages: user(STORY) };
    const viaHeader = await http(server.url, "POST", "/v1/messages", { headers: { "x-api-key": caller.key }, body });
    const viaBearer = await http(server.url, "POST", "/v1/messages", { token: caller.key, body });
    expect(viaHeader.status).toBe(200);
    expect(viaBearer.status).toBe(200);
    expect(viaHeader.body.type).toBe("message");
  });

  test("when no key is sent, then 401 with the envelope", async () => {
    const res = await http(server.url, "POST", "/v1/messages", {
      body: { model: CHAT_MODEL, max_tokens: 3, messages: user(STORY) },
    });
    expectEnvelope(res, 401);
  });

  test("when a wrong key is sent, then 401 with the envelope and the SDK raises AuthenticationError", async () => {
    const body = { model: CHAT_MODEL, max_tokens: 3, messages: user(STORY) };
    const badKey = `sk_${"x".repeat(48)}`;
    expectEnvelope(await http(server.url, "POST", "/v1/messages", { headers: { "x-api-key": badKey }, body }), 401);
    expectEnvelope(await http(server.url, "POST", "/v1/messages", { token: badKey, body }), 401);
    const err = await anthropicClient(server.url, badKey)
      .messages.create(body)
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Anthropic.AuthenticationError);
    expect((err as InstanceType<typeof Anthropic.AuthenticationError>).status).toBe(401);
  });
});

describe("POST /v1/messages: invalid input", () => {
  const valid = { model: CHAT_MODEL, max_tokens: 5, messages: user(STORY) };
  const post = (body: unknown, query = "") =>
    http(server.url, "POST", `/v1/messages${query}`, { headers: { "x-api-key": caller.key }, body });

  test("when max_tokens is missing, then 400 naming max_tokens", async () => {
    const { max_tokens: _omitted, ...body } = valid;
    expectInvalid(await post(body), "max_tokens");
  });

  test("when max_tokens is 0 or not an integer, then 400 naming max_tokens", async () => {
    expectInvalid(await post({ ...valid, max_tokens: 0 }), "max_tokens");
    expectInvalid(await post({ ...valid, max_tokens: 2.5 }), "max_tokens");
    expectInvalid(await post({ ...valid, max_tokens: "5" }), "max_tokens");
  });

  test("when messages is empty or missing, then 400 naming messages", async () => {
    expectInvalid(await post({ ...valid, messages: [] }), "messages");
    expectInvalid(await post({ model: CHAT_MODEL, max_tokens: 5 }), "messages");
  });

  test("when a message has role system, then 400 naming its role", async () => {
    expectInvalid(await post({ ...valid, messages: [{ role: "system", content: "Be nice." }] }), "messages[0].role");
  });

  test("when a message has empty content, then 400 naming it; only a final assistant prefill may be empty", async () => {
    expectInvalid(await post({ ...valid, messages: user("") }), "messages[0].content");
    expectInvalid(await post({ ...valid, messages: [{ role: "user", content: [] }] }), "messages[0].content");
    expectInvalid(
      await post({ ...valid, messages: [{ role: "user", content: [{ type: "text", text: "" }] }] }),
      "messages[0].content[0].text",
    );
    expectInvalid(
      await post({
        ...valid,
        messages: [
          { role: "user", content: "Hi" },
          { role: "assistant", content: "" },
          { role: "user", content: "Go on" },
        ],
      }),
      "messages[1].content",
    );
    const prefill = await post({
      ...valid,
      messages: [
        { role: "user", content: STORY },
        { role: "assistant", content: "" },
      ],
    });
    expect(prefill.status).toBe(200);
    expect(prefill.body.type).toBe("message");
  });

  test("when temperature is above 1 or below 0, then 400 naming temperature", async () => {
    expectInvalid(await post({ ...valid, temperature: 1.5 }), "temperature");
    expectInvalid(await post({ ...valid, temperature: -0.1 }), "temperature");
  });

  test("when stop_sequences or system have the wrong type, then 400 naming the field", async () => {
    expectInvalid(await post({ ...valid, stop_sequences: "The" }), "stop_sequences");
    expectInvalid(await post({ ...valid, system: 42 }), "system");
  });

  test("when a content block is not text, then 400 naming the block", async () => {
    const res = await post({
      ...valid,
      messages: [{ role: "user", content: [{ type: "image", source: { type: "base64", data: "AAAA" } }] }],
    });
    expectInvalid(res, "messages[0].content[0]");
  });

  test("when prompt and max_tokens exceed the 512-token context, then 400", async () => {
    expectInvalid(await post({ ...valid, max_tokens: 1000 }), "messages");
  });

  test("when metadata.stream_id is not a UUID, then 400 naming it", async () => {
    expectInvalid(await post({ ...valid, metadata: { stream_id: "not-a-uuid" } }), "metadata.stream_id");
  });

  test("when the model is unknown, then 404 with the envelope and the SDK raises NotFoundError", async () => {
    const res = await post({ ...valid, model: "no-such-model" });
    expectEnvelope(res, 404);
    expect(res.body.detail).toContain("no-such-model");
    const err = await client.messages.create({ ...valid, model: "no-such-model" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Anthropic.NotFoundError);
  });

  test("when an embedding model is named, then 400 naming model", async () => {
    expectInvalid(await post({ ...valid, model: EMBED_MODEL }), "model");
  });

  const TOO_HOT = { temperature: 1.5 };

  test("when the SDK sends an invalid request, then it raises BadRequestError with status 400", async () => {
    const err = await client.messages.create({ ...valid, ...TOO_HOT }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Anthropic.BadRequestError);
    expect((err as InstanceType<typeof Anthropic.BadRequestError>).status).toBe(400);
  });
});

describe("POST /v1/messages: metering", () => {
  test("when a message is created, then one activity row and one usage charge record it with the key", async () => {
    const fresh = await createTestCaller(server.url);
    const message = await anthropicClient(server.url, fresh.key).messages.create({
      model: CHAT_MODEL,
      max_tokens: 60,
      ...GREEDY,
      messages: user(STORY),
    });

    const rows = await server.db<any>("SELECT * FROM activity WHERE team_id = $1", [fresh.teamId]);
    expect(rows).toHaveLength(1);
    const row = rows[0];
    expect(row.id).toBe(activityId(message.id));
    expect(row).toEqual(
      expect.objectContaining({
        endpoint: "/v1/messages",
        status: "completed",
        type: "standalone",
        model: CHAT_MODEL,
        user_id: fresh.userId,
        api_key_id: fresh.keyId,
        api_key_name: "test key",
        api_key_prefix: fresh.keyPrefix,
      }),
    );
    const cacheRead = message.usage.cache_read_input_tokens ?? 0;
    expect(row.prompt_tokens).toBe(message.usage.input_tokens + cacheRead);
    expect(row.cached_prompt_tokens).toBe(cacheRead);
    expect(row.completion_tokens).toBe(message.usage.output_tokens);
    expect(row.total_tokens).toBe(row.prompt_tokens + row.completion_tokens);
    expect(row.result_json.id).toBe(message.id);
    expect(row.body_json.max_tokens).toBe(60);

    // Catalog prices (micro-USD per million tokens): input 0.02, cached 0.01, output 0.05; half up.
    const scaled =
      BigInt(message.usage.input_tokens) * 20_000n +
      BigInt(cacheRead) * 10_000n +
      BigInt(message.usage.output_tokens) * 50_000n;
    const cost = (scaled + 500_000n) / 1_000_000n;
    expect(BigInt(row.cost_micros)).toBe(cost);
    expect(cost).toBeGreaterThan(0n);

    const ledger = await server.db<any>("SELECT * FROM credit_ledger WHERE team_id = $1 AND type = 'usage'", [
      fresh.teamId,
    ]);
    expect(ledger).toHaveLength(1);
    expect(ledger[0].source_id).toBe(row.id);
    expect(BigInt(ledger[0].amount_micros)).toBe(-BigInt(row.cost_micros));
    const [team] = await server.db<any>("SELECT credit_balance_micros FROM teams WHERE id = $1", [fresh.teamId]);
    expect(BigInt(ledger[0].balance_after_micros)).toBe(BigInt(team.credit_balance_micros));
  });

  test("when several messages are created at once, then each is recorded and charged exactly once", async () => {
    const fresh = await createTestCaller(server.url);
    const sdk = anthropicClient(server.url, fresh.key);
    const prompts = ["The cat", "The dog", "A bird", "The sun", "Mom said", "Ben ran"];
    const messages = await Promise.all(
      prompts.map((p) => sdk.messages.create({ model: CHAT_MODEL, max_tokens: 40, messages: user(p) })),
    );
    const rows = await server.db<any>("SELECT id, cost_micros FROM activity WHERE team_id = $1", [fresh.teamId]);
    expect(rows.map((r) => r.id).sort()).toEqual(messages.map((m) => activityId(m.id)).sort());
    const ledger = await server.db<any>(
      "SELECT source_id, amount_micros FROM credit_ledger WHERE team_id = $1 AND type = 'usage'",
      [fresh.teamId],
    );
    expect(ledger.map((l) => l.source_id).sort()).toEqual(rows.map((r) => r.id).sort());
    const spent = rows.reduce((sum, r) => sum + BigInt(r.cost_micros), 0n);
    expect(spent).toBeGreaterThan(0n);
    expect(ledger.reduce((sum, l) => sum + BigInt(l.amount_micros), 0n)).toBe(-spent);
    const [team] = await server.db<any>("SELECT credit_balance_micros FROM teams WHERE id = $1", [fresh.teamId]);
    expect(BigInt(team.credit_balance_micros)).toBe(5_000_000n - spent);
  });

  test("when metadata carries custom_id, then the activity row keeps it", async () => {
    const fresh = await createTestCaller(server.url);
    const res = await http(server.url, "POST", "/v1/messages", {
      headers: { "x-api-key": fresh.key },
      body: {
        model: CHAT_MODEL,
        max_tokens: 3,
        messages: user(STORY),
        metadata: { custom_id: "story-7", user_id: "u" },
      },
    });
    expect(res.status).toBe(200);
    const rows = await server.db<any>("SELECT custom_id, id FROM activity WHERE team_id = $1", [fresh.teamId]);
    expect(rows).toEqual([{ custom_id: "story-7", id: activityId(res.body.id) }]);
  });

  test("when a request is refused with 400, then nothing is metered or charged", async () => {
    const fresh = await createTestCaller(server.url);
    const res = await http(server.url, "POST", "/v1/messages", {
      headers: { "x-api-key": fresh.key },
      body: { model: CHAT_MODEL, max_tokens: 1000, messages: user(STORY) },
    });
    expectEnvelope(res, 400);
    expect(await server.db("SELECT id FROM activity WHERE team_id = $1", [fresh.teamId])).toHaveLength(0);
    expect(
      await server.db("SELECT id FROM credit_ledger WHERE team_id = $1 AND type = 'usage'", [fresh.teamId]),
    ).toHaveLength(0);
  });
});
