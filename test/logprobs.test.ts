/**
 * Log-probabilities (issue 26, item 3) through the official `openai` client: Chat Completions
 * `logprobs` + `top_logprobs` and Responses `include: ["message.output_text.logprobs"]` +
 * `top_logprobs`, plain and streamed, on the embedded engine and through an upstream Switchyard.
 *
 * The numbers are the model's own distribution at each position, so under greedy decoding
 * (temperature 0, no grammar) every chosen token is the most likely one there: its log-probability
 * equals the first alternative's. Read at the wrong position, they would not.
 */
import type { ChatCompletionTokenLogprob } from "openai/resources/chat/completions";
import {
  CHAT_MODEL,
  type TestServer,
  createTestCaller,
  expectInvalid,
  http,
  openaiClient,
  startTestServer,
} from "./support/harness.js";
import { addUpstreamChat, writeEditedCatalog } from "./support/test-catalog.js";

let server: TestServer;
let caller: Awaited<ReturnType<typeof createTestCaller>>;

beforeAll(async () => {
  server = await startTestServer();
  caller = await createTestCaller(server.url);
});
afterAll(() => server.close());

const ask = { model: CHAT_MODEL, messages: [{ role: "user" as const, content: "Once upon a time" }] };

/** Every entry is a greedy choice: the chosen token is the first (most likely) alternative. */
function expectGreedy(entries: ChatCompletionTokenLogprob[], top: number): void {
  expect(entries.length).toBeGreaterThan(0);
  for (const e of entries) {
    expect(e.logprob).toBeLessThanOrEqual(0);
    if (!e.token.startsWith("bytes:")) expect(e.bytes).toEqual([...Buffer.from(e.token, "utf8")]);
    expect(e.top_logprobs).toHaveLength(top);
    const sorted = [...e.top_logprobs].sort((a, b) => b.logprob - a.logprob);
    expect(e.top_logprobs).toEqual(sorted);
    expect(e.top_logprobs[0].token).toBe(e.token);
    expect(e.logprob).toBeCloseTo(e.top_logprobs[0].logprob, 6);
  }
}

/**
 * The same tokens with the same log-probabilities, to 4 decimals: llama.cpp's float results vary
 * in the last digits with how tokens are batched (a prompt prefix reused from the KV cache).
 */
function expectSame(a: ChatCompletionTokenLogprob[], b: ChatCompletionTokenLogprob[]): void {
  expect(a.map((e) => [e.token, e.top_logprobs.map((t) => t.token)])).toEqual(
    b.map((e) => [e.token, e.top_logprobs.map((t) => t.token)]),
  );
  a.forEach((e, i) => {
    expect(e.logprob).toBeCloseTo(b[i].logprob, 4);
    e.top_logprobs.forEach((t, j) => expect(t.logprob).toBeCloseTo(b[i].top_logprobs[j].logprob, 4));
  });
}

describe("chat logprobs", () => {
  test("when logprobs with top_logprobs are asked for, then each content token comes with its log-probability and the top alternatives", async () => {
    const client = openaiClient(server.url, caller.key);
    const completion = await client.chat.completions.create({
      ...ask,
      max_tokens: 24,
      temperature: 0,
      logprobs: true,
      top_logprobs: 5,
    });
    const choice = completion.choices[0];
    const entries = choice.logprobs!.content!;
    expect(entries.map((e) => e.token).join("")).toBe(choice.message.content);
    expect(entries).toHaveLength(completion.usage!.completion_tokens);
    expectGreedy(entries, 5);
  });

  test("when logprobs are asked for at temperature 1.5, then they are the model's distribution, not the sampler's", async () => {
    const client = openaiClient(server.url, caller.key);
    const greedy = await client.chat.completions.create({ ...ask, max_tokens: 8, temperature: 0, logprobs: true });
    const hot = await client.chat.completions.create({
      ...ask,
      max_tokens: 1,
      temperature: 1.5,
      seed: 1,
      logprobs: true,
      top_logprobs: 20,
    });
    // The first position's distribution is the same whatever the temperature: the greedy token's
    // log-probability is found among the hot request's alternatives with the same value.
    const first = greedy.choices[0].logprobs!.content![0];
    const same = hot.choices[0].logprobs!.content![0].top_logprobs.find((t) => t.token === first.token);
    // (llama.cpp's float results vary in the last digits with how tokens are batched.)
    expect(same?.logprob).toBeCloseTo(first.logprob, 4);
  });

  test("when the answer has multi-byte characters, then the entries' bytes join into the content's bytes, one entry per token", async () => {
    const client = openaiClient(server.url, caller.key);
    const word = "日本語 é 😀";
    const completion = await client.chat.completions.create({
      ...ask,
      max_tokens: 60,
      logprobs: true,
      response_format: {
        type: "json_schema",
        json_schema: {
          name: "w",
          strict: true,
          schema: { type: "object", properties: { w: { const: word } }, required: ["w"], additionalProperties: false },
        },
      },
    });
    const content = completion.choices[0].message.content!;
    expect(content).toContain(word);
    const entries = completion.choices[0].logprobs!.content!;
    expect(entries).toHaveLength(completion.usage!.completion_tokens);
    expect(Buffer.from(entries.flatMap((e) => e.bytes ?? [])).toString("utf8")).toBe(content);
    for (const e of entries) expect(e.token).not.toContain("\uFFFD");
  });

  test("when logprobs is asked for without top_logprobs, then each entry has no alternatives", async () => {
    const client = openaiClient(server.url, caller.key);
    const completion = await client.chat.completions.create({ ...ask, max_tokens: 8, logprobs: true });
    for (const e of completion.choices[0].logprobs!.content!) expect(e.top_logprobs).toEqual([]);
  });

  test("when logprobs are not asked for, then logprobs is null", async () => {
    const client = openaiClient(server.url, caller.key);
    const completion = await client.chat.completions.create({ ...ask, max_tokens: 4 });
    expect(completion.choices[0].logprobs).toBeNull();
  });

  test("when the answer is streamed, then the accumulated log-probabilities equal the unstreamed ones", async () => {
    const client = openaiClient(server.url, caller.key);
    const body = { ...ask, max_tokens: 24, temperature: 0, logprobs: true, top_logprobs: 3 };
    const plain = await client.chat.completions.create(body);
    const stream = client.chat.completions.stream(body);
    const streamed = await stream.finalChatCompletion();
    expect(streamed.choices[0].message.content).toBe(plain.choices[0].message.content);
    expectSame(streamed.choices[0].logprobs!.content!, plain.choices[0].logprobs!.content!);
  });

  test("when a stop string cuts the answer, then the entries stop at the token that reaches the cut", async () => {
    const client = openaiClient(server.url, caller.key);
    const full = await client.chat.completions.create({ ...ask, max_tokens: 24, temperature: 0 });
    const text = full.choices[0].message.content!;
    const stop = text.slice(Math.floor(text.length / 2), Math.floor(text.length / 2) + 3);
    const cut = await client.chat.completions.create({ ...ask, max_tokens: 24, temperature: 0, stop, logprobs: true });
    const content = cut.choices[0].message.content!;
    const entries = cut.choices[0].logprobs!.content!;
    const joined = entries.map((e) => e.token).join("");
    expect(joined.startsWith(content)).toBe(true);
    expect(joined.length - content.length).toBeLessThan(entries[entries.length - 1].token.length || 1);
  });

  test("when top_logprobs is set without logprobs, then 400 names top_logprobs", async () => {
    const res = await http(server.url, "POST", "/v1/chat/completions", {
      token: caller.key,
      body: { ...ask, top_logprobs: 2 },
    });
    expectInvalid(res, "top_logprobs");
  });

  test("when top_logprobs is over 20, then 400 names it", async () => {
    const res = await http(server.url, "POST", "/v1/chat/completions", {
      token: caller.key,
      body: { ...ask, logprobs: true, top_logprobs: 21 },
    });
    expectInvalid(res, "top_logprobs");
  });

  test("when there is no key, then 401", async () => {
    const res = await http(server.url, "POST", "/v1/chat/completions", { body: { ...ask, logprobs: true } });
    expect(res.status).toBe(401);
  });
});

describe("responses logprobs", () => {
  test("when include asks for output_text.logprobs, then the output text carries them", async () => {
    const client = openaiClient(server.url, caller.key);
    const response = await client.responses.create({
      model: CHAT_MODEL,
      input: "Once upon a time",
      max_output_tokens: 16,
      temperature: 0,
      include: ["message.output_text.logprobs"],
      top_logprobs: 4,
    });
    const item = response.output[0];
    if (item.type !== "message" || item.content[0].type !== "output_text") throw new Error("no text");
    const logprobs = item.content[0].logprobs!;
    expect(logprobs.map((l) => l.token).join("")).toBe(response.output_text);
    expectGreedy(logprobs as ChatCompletionTokenLogprob[], 4);
    // Stored with the response: read back the same.
    const read = await client.responses.retrieve(response.id);
    expect(read.output).toEqual(response.output);
  });

  test("when the response is streamed, then output_text.done and the completed response carry the log-probabilities", async () => {
    const client = openaiClient(server.url, caller.key);
    const stream = await client.responses.create({
      model: CHAT_MODEL,
      input: "Once upon a time",
      max_output_tokens: 16,
      temperature: 0,
      include: ["message.output_text.logprobs"],
      stream: true,
    });
    let done: unknown[] | null = null;
    let completed: unknown[] | undefined;
    let text = "";
    for await (const event of stream) {
      if (event.type === "response.output_text.delta") text += event.delta;
      if (event.type === "response.output_text.done") done = event.logprobs;
      if (event.type === "response.completed" || event.type === "response.incomplete") {
        const item = event.response.output[0];
        if (item.type === "message" && item.content[0].type === "output_text") completed = item.content[0].logprobs;
      }
    }
    expect(done).not.toBeNull();
    expect((done as Array<{ token: string }>).map((l) => l.token).join("")).toBe(text);
    expect(completed).toEqual(done);
  });

  test("when include is not given, then the output text has no logprobs", async () => {
    const client = openaiClient(server.url, caller.key);
    const response = await client.responses.create({ model: CHAT_MODEL, input: "Once", max_output_tokens: 4 });
    const item = response.output[0];
    if (item.type !== "message" || item.content[0].type !== "output_text") throw new Error("no text");
    expect(item.content[0].logprobs).toBeUndefined();
  });

  test("when include names something unknown, then 400 names that entry", async () => {
    const res = await http(server.url, "POST", "/v1/responses", {
      token: caller.key,
      body: { model: CHAT_MODEL, input: "hi", include: ["message.output_text.logprobs", "nonsense.value"] },
    });
    expectInvalid(res, "include[1]");
  });

  test("when top_logprobs is out of range, then 400 names it", async () => {
    const res = await http(server.url, "POST", "/v1/responses", {
      token: caller.key,
      body: { model: CHAT_MODEL, input: "hi", top_logprobs: 30 },
    });
    expectInvalid(res, "top_logprobs");
  });
});

describe("through the upstream engine (a gateway in front of another Switchyard)", () => {
  let upstream: TestServer;
  let gateway: TestServer;
  let gatewayKey: string;

  beforeAll(async () => {
    upstream = await startTestServer();
    const account = await createTestCaller(upstream.url);
    const catalog = writeEditedCatalog((c) => addUpstreamChat(c, "up-chat"));
    gateway = await startTestServer({
      catalogPath: catalog,
      upstreams: [{ name: "a", base_url: `${upstream.url}/v1`, api_key: account.key, models: [CHAT_MODEL] }],
    });
    gatewayKey = (await createTestCaller(gateway.url)).key;
  }, 120_000);
  afterAll(async () => {
    await gateway?.close();
    await upstream?.close();
  });

  test("when logprobs go through the gateway, then the upstream's numbers come back as the embedded engine gives them", async () => {
    const body = { messages: ask.messages, max_tokens: 12, temperature: 0, logprobs: true, top_logprobs: 2 };
    const direct = await openaiClient(upstream.url, (await createTestCaller(upstream.url)).key).chat.completions.create(
      { ...body, model: CHAT_MODEL },
    );
    const through = await openaiClient(gateway.url, gatewayKey).chat.completions.create({ ...body, model: "up-chat" });
    expect(through.choices[0].message.content).toBe(direct.choices[0].message.content);
    expectSame(through.choices[0].logprobs!.content!, direct.choices[0].logprobs!.content!);
    // Streamed through the gateway, the SDK accumulates the same numbers.
    const streamed = await openaiClient(gateway.url, gatewayKey)
      .chat.completions.stream({ ...body, model: "up-chat" })
      .finalChatCompletion();
    expect(streamed.choices[0].message.content).toBe(direct.choices[0].message.content);
    expectSame(streamed.choices[0].logprobs!.content!, direct.choices[0].logprobs!.content!);
  });

  test("when Responses asks for log-probabilities through the gateway, then the output text carries the upstream's", async () => {
    const response = await openaiClient(gateway.url, gatewayKey).responses.create({
      model: "up-chat",
      input: "Once upon a time",
      max_output_tokens: 8,
      temperature: 0,
      include: ["message.output_text.logprobs"],
    });
    const item = response.output[0];
    if (item.type !== "message" || item.content[0].type !== "output_text") throw new Error("no text");
    expect(item.content[0].logprobs!.map((l) => l.token).join("")).toBe(response.output_text);
  });
});
