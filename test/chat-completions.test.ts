/** `POST /v1/chat/completions` through the official `openai` client, plus metering and errors. */
import {
  CHAT_MODEL,
  EMBED_MODEL,
  type TestServer,
  createTestCaller,
  expectEnvelope,
  expectInvalid,
  http,
  openaiClient,
  startTestServer,
} from "./support/harness.js";

let server: TestServer;
let caller: Awaited<ReturnType<typeof createTestCaller>>;

beforeAll(async () => {
  server = await startTestServer();
  caller = await createTestCaller(server.url);
});
afterAll(() => server.close());

const greedy = (content: string, max_tokens = 24) => ({
  model: CHAT_MODEL,
  messages: [{ role: "user" as const, content }],
  max_tokens,
  temperature: 0,
});

describe("chat completions", () => {
  test("when the openai client asks for a completion, then it gets real model text with usage", async () => {
    const client = openaiClient(server.url, caller.key);
    const completion = await client.chat.completions.create(greedy("Once upon a time", 30));
    expect(completion.object).toBe("chat.completion");
    expect(completion.id).toMatch(/^chatcmpl-[0-9a-f-]{36}$/);
    expect(completion.model).toBe(CHAT_MODEL);
    expect(completion.choices).toHaveLength(1);
    const text = completion.choices[0].message.content ?? "";
    expect(text.length).toBeGreaterThan(10);
    expect(text).toMatch(/[a-z]{3,}/);
    expect(completion.choices[0].finish_reason).toBe("length");
    expect(completion.usage?.completion_tokens).toBe(30);
    expect(completion.usage?.prompt_tokens).toBeGreaterThan(1);
    expect(completion.usage?.total_tokens).toBe(completion.usage!.prompt_tokens + 30);
  });

  test("when temperature is 0, then the same prompt gives the same text", async () => {
    const client = openaiClient(server.url, caller.key);
    const a = await client.chat.completions.create(greedy("The little dog"));
    const b = await client.chat.completions.create(greedy("The little dog"));
    expect(a.choices[0].message.content).toBe(b.choices[0].message.content);
    expect(a.id).not.toBe(b.id);
  });

  test("when a stop sequence the model emits is given, then the text ends before it with finish_reason stop", async () => {
    const client = openaiClient(server.url, caller.key);
    const full = (await client.chat.completions.create(greedy("Once upon a time", 40))).choices[0].message.content!;
    const words = full.split(/\s+/).filter((w) => /^[a-z]{4,}$/.test(w));
    const stop = words[2];
    expect(stop).toBeDefined();
    const cut = await client.chat.completions.create({ ...greedy("Once upon a time", 40), stop: [stop] });
    expect(cut.choices[0].finish_reason).toBe("stop");
    expect(cut.choices[0].message.content).toBe(full.slice(0, full.indexOf(stop)));
    expect(cut.usage!.completion_tokens).toBeLessThan(40);
  });

  test("when stream is true with include_usage, then chunks carry the text, a finish reason and a usage chunk", async () => {
    const client = openaiClient(server.url, caller.key);
    const plain = await client.chat.completions.create(greedy("Lily and Ben", 20));
    const stream = await client.chat.completions.create({
      ...greedy("Lily and Ben", 20),
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = "";
    let finish: string | null = null;
    let usage: { completion_tokens: number } | null | undefined;
    let role: string | undefined;
    let chunks = 0;
    for await (const chunk of stream) {
      chunks++;
      expect(chunk.object).toBe("chat.completion.chunk");
      if (chunk.choices.length === 0) usage = chunk.usage;
      for (const choice of chunk.choices) {
        role ??= choice.delta.role;
        text += choice.delta.content ?? "";
        finish = choice.finish_reason ?? finish;
      }
    }
    expect(chunks).toBeGreaterThan(3);
    expect(role).toBe("assistant");
    expect(finish).toBe("length");
    expect(text).toBe(plain.choices[0].message.content);
    expect(usage?.completion_tokens).toBe(20);
  });

  test("when streaming over raw HTTP, then it is SSE ending with [DONE] and has the overhead header", async () => {
    const res = await fetch(`${server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${caller.key}`, "content-type": "application/json" },
      body: JSON.stringify({ ...greedy("Tom", 5), stream: true }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
    expect(Number(res.headers.get("x-switchyard-overhead-ms"))).toBeGreaterThanOrEqual(0);
    const body = await res.text();
    const frames = body.split("\n\n").filter(Boolean);
    expect(frames.at(-1)).toBe("data: [DONE]");
    expect(frames.every((f) => f.startsWith("data: "))).toBe(true);
  });

  test("when 8 requests run at once, then each gets the same text it gets alone", async () => {
    const client = openaiClient(server.url, caller.key);
    const prompts = [
      "Once upon a time",
      "Lily",
      "The big red ball",
      "Tom was sad",
      "A little bird",
      "The sun",
      "Sue and Max",
      "One day",
    ];
    const alone: string[] = [];
    for (const p of prompts)
      alone.push((await client.chat.completions.create(greedy(p, 32))).choices[0].message.content!);
    const together = await Promise.all(prompts.map((p) => client.chat.completions.create(greedy(p, 32))));
    expect(together.map((c) => c.choices[0].message.content)).toEqual(alone);
    expect(new Set(alone).size).toBeGreaterThan(4);
    for (const c of together) expect(c.usage!.completion_tokens).toBeLessThanOrEqual(32);
  });

  test("when unknown fields are sent, then they are ignored", async () => {
    const res = await http(server.url, "POST", "/v1/chat/completions", {
      token: caller.key,
      body: { ...greedy("Hi", 4), include_reasoning: true, some_future_field: { a: 1 } },
    });
    expect(res.status).toBe(200);
    expect(res.body.choices[0].message.role).toBe("assistant");
  });

  test("when the request completes, then one activity row and one ledger charge record it", async () => {
    const res = await http(server.url, "POST", "/v1/chat/completions", {
      token: caller.key,
      body: { ...greedy("Once upon a time", 12), metadata: { custom_id: "job-7" } },
    });
    expect(res.status).toBe(200);
    const activityId = (res.body.id as string).replace("chatcmpl-", "");
    const [row] = await server.db<any>("SELECT * FROM activity WHERE id = $1", [activityId]);
    expect(row).toMatchObject({
      team_id: caller.teamId,
      type: "standalone",
      status: "completed",
      endpoint: "/v1/chat/completions",
      model: CHAT_MODEL,
      custom_id: "job-7",
      prompt_tokens: res.body.usage.prompt_tokens,
      completion_tokens: 12,
      total_tokens: res.body.usage.total_tokens,
      api_key_id: caller.keyId,
      api_key_name: "test key",
      api_key_prefix: caller.keyPrefix,
    });
    // 0.02 USD/M input, 0.05 USD/M output, rounded half up once per request.
    const expected = Math.floor((res.body.usage.prompt_tokens * 20_000 + 12 * 50_000 + 500_000) / 1_000_000);
    expect(Number(row.cost_micros)).toBe(expected);
    const ledger = await server.db<any>("SELECT * FROM credit_ledger WHERE source_id = $1", [activityId]);
    expect(ledger).toHaveLength(expected > 0 ? 1 : 0);
    if (expected > 0) {
      expect(ledger[0].type).toBe("usage");
      expect(Number(ledger[0].amount_micros)).toBe(-expected);
      const [team] = await server.db<any>("SELECT credit_balance_micros FROM teams WHERE id = $1", [caller.teamId]);
      const [newest] = await server.db<any>(
        "SELECT balance_after_micros FROM credit_ledger WHERE team_id = $1 ORDER BY created_at DESC, id DESC LIMIT 1",
        [caller.teamId],
      );
      expect(newest.balance_after_micros).toBe(team.credit_balance_micros);
    }
    expect(Number(res.headers.get("x-switchyard-overhead-ms"))).toBeGreaterThanOrEqual(0);
  });
});

describe("awkward input", () => {
  test("when bodies carry NUL characters and lone surrogates, then they and the requests flushed with them are recorded", async () => {
    const odd = [
      { ...greedy("Tom", 4), user: "a\u0000b", metadata: { custom_id: "nul-\u0000" } },
      { ...greedy("Tom", 4), metadata: { custom_id: "surrogate-\ud800" } },
      { ...greedy("Tom", 4), metadata: { custom_id: "escaped-\\u0000" } },
      { ...greedy("Tom", 4), metadata: { custom_id: "plain" } },
    ];
    const results = await Promise.all(
      odd.map((body) => http(server.url, "POST", "/v1/chat/completions", { token: caller.key, body })),
    );
    expect(results.map((r) => r.status)).toEqual([200, 200, 200, 200]);
    const ids = results.map((r) => (r.body.id as string).replace("chatcmpl-", ""));
    const rows = await server.db<any>(
      "SELECT id, custom_id FROM activity WHERE id = ANY($1::uuid[]) ORDER BY custom_id",
      [ids],
    );
    expect(rows.map((r: any) => r.custom_id).sort()).toEqual([
      "escaped-\\u0000",
      "nul-\ufffd",
      "plain",
      "surrogate-\ufffd",
    ]);
  });

  test("when a prompt nearly fills the context, then all of it is kept (a repeat reuses all but the last token)", async () => {
    const prompt = "Once upon a time, ".repeat(94);
    const first = await http(server.url, "POST", "/v1/chat/completions", {
      token: caller.key,
      body: greedy(prompt, 4),
    });
    expect(first.status).toBe(200);
    const promptTokens = first.body.usage.prompt_tokens;
    expect(promptTokens).toBeGreaterThan(460);
    expect(promptTokens + 4).toBeLessThanOrEqual(512);
    const second = await http(server.url, "POST", "/v1/chat/completions", {
      token: caller.key,
      body: greedy(prompt, 4),
    });
    expect(second.body.usage.prompt_tokens_details.cached_tokens).toBe(promptTokens - 1);
    expect(second.body.choices[0].message.content).toBe(first.body.choices[0].message.content);
  });
});

describe("chat completion errors", () => {
  test("when messages are missing or malformed, then 400 names the field", async () => {
    const post = (body: unknown) => http(server.url, "POST", "/v1/chat/completions", { token: caller.key, body });
    expectInvalid(await post({ model: CHAT_MODEL }), "messages");
    expectInvalid(await post({ model: CHAT_MODEL, messages: [] }), "messages");
    expectInvalid(await post({ model: CHAT_MODEL, messages: [{ content: "hi" }] }), "messages[0].role");
    expectInvalid(await post({ ...greedy("hi"), temperature: 3 }), "temperature");
    expectInvalid(await post({ ...greedy("hi"), max_tokens: 0 }), "max_tokens");
    expectInvalid(await post({ ...greedy("hi"), max_tokens: "ten" }), "max_tokens");
    const many = await post({ ...greedy("hi"), n: 2 });
    expectInvalid(many, "n");
    // Named with the model, as every field a model cannot honour (issue 26, item 6).
    expect(many.body.detail).toContain(CHAT_MODEL);
    expect(many.body.extra[0].message).toContain(CHAT_MODEL);
    expectInvalid(await post({ ...greedy("hi"), n: 0 }), "n");
    expectInvalid(await post({ ...greedy("hi"), metadata: { stream_id: "not-a-uuid" } }), "metadata.stream_id");
    expectInvalid(await post({ messages: [{ role: "user", content: "hi" }] }), "model");
  });

  test("when bad input is sent, then nothing is recorded", async () => {
    const before = await server.db<any>("SELECT count(*)::int AS n FROM activity");
    await http(server.url, "POST", "/v1/chat/completions", {
      token: caller.key,
      body: { ...greedy("hi"), temperature: -1 },
    });
    const after = await server.db<any>("SELECT count(*)::int AS n FROM activity");
    expect(after[0].n).toBe(before[0].n);
  });

  test("when the prompt and max_tokens exceed the context, then 400", async () => {
    const res = await http(server.url, "POST", "/v1/chat/completions", {
      token: caller.key,
      body: greedy("Once upon a time", 600),
    });
    expectEnvelope(res, 400);
    expect(res.body.detail).toMatch(/context/);
  });

  test("when the content has an image part, then 400 names the part", async () => {
    const res = await http(server.url, "POST", "/v1/chat/completions", {
      token: caller.key,
      body: {
        model: CHAT_MODEL,
        messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "http://x/y.png" } }] }],
      },
    });
    expectInvalid(res, "messages[0].content[0]");
  });

  test("when the model is unknown, then 404; when it is an embedding model, then 400", async () => {
    const unknown = await http(server.url, "POST", "/v1/chat/completions", {
      token: caller.key,
      body: { ...greedy("hi"), model: "no-such-model" },
    });
    expectEnvelope(unknown, 404);
    const wrong = await http(server.url, "POST", "/v1/chat/completions", {
      token: caller.key,
      body: { ...greedy("hi"), model: EMBED_MODEL },
    });
    expectInvalid(wrong, "model");
  });

  test("when a proxy's Basic Authorization comes with an x-api-key, then the key is used", async () => {
    const res = await http(server.url, "POST", "/v1/chat/completions", {
      headers: { authorization: "Basic dXNlcjpwYXNz", "x-api-key": caller.key },
      body: greedy("hi", 4),
    });
    expect(res.status).toBe(200);
    expectEnvelope(
      await http(server.url, "POST", "/v1/chat/completions", {
        headers: { authorization: "Basic dXNlcjpwYXNz" },
        body: greedy("hi"),
      }),
      401,
    );
  });

  test("when no or a wrong key is sent, then 401 with the envelope", async () => {
    expectEnvelope(await http(server.url, "POST", "/v1/chat/completions", { body: greedy("hi") }), 401);
    expectEnvelope(
      await http(server.url, "POST", "/v1/chat/completions", { token: "sk_" + "x".repeat(48), body: greedy("hi") }),
      401,
    );
    const client = openaiClient(server.url, "sk_wrong");
    await expect(client.chat.completions.create(greedy("hi"))).rejects.toMatchObject({ status: 401 });
  });

  test("when the team has no credit, then 402 before any engine work and nothing is charged", async () => {
    const broke = await createTestCaller(server.url);
    await server.db("UPDATE teams SET credit_balance_micros = 0 WHERE id = $1", [broke.teamId]);
    // The balance cache of this process is refreshed by NOTIFY, as any writer of balances does.
    await server.db("SELECT pg_notify('switchyard_cache', $1)", [`balance:${broke.teamId}`]);
    await new Promise((r) => setTimeout(r, 200));
    const res = await http(server.url, "POST", "/v1/chat/completions", { token: broke.key, body: greedy("hi") });
    expectEnvelope(res, 402);
    const rows = await server.db<any>("SELECT count(*)::int AS n FROM activity WHERE team_id = $1", [broke.teamId]);
    expect(rows[0].n).toBe(0);
  });
});
