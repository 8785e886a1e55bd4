/** `POST /v1/responses` and `GET /v1/responses/{id}` through the official `openai` client. */
import {
  CHAT_MODEL,
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

const RESPONSE_FIELDS = [
  "created_at",
  "error",
  "id",
  "incomplete_details",
  "model",
  "object",
  "output",
  "service_tier",
  "status",
  "usage",
];

describe("create a response", () => {
  test("when the openai client creates a response, then it is the spec's Response object with real text", async () => {
    const client = openaiClient(server.url, caller.key);
    // Greedy decoding of "Sam" ends its story (the model starts a new one with BOS) within the context.
    const response = await client.responses.create({ model: CHAT_MODEL, input: "Sam", temperature: 0 });
    const raw = response as unknown as Record<string, unknown>;
    // The SDK adds `output_text`; the wire object has exactly the spec's fields.
    expect(
      Object.keys(raw)
        .filter((k) => k !== "output_text")
        .sort(),
    ).toEqual(RESPONSE_FIELDS);
    expect(response.id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(response.object).toBe("response");
    expect(response.status).toBe("completed");
    expect(response.model).toBe(CHAT_MODEL);
    expect(Math.abs(response.created_at - Date.now() / 1000)).toBeLessThan(60);
    expect(response.service_tier).toBe("default");
    expect(response.error).toBeNull();
    expect(response.output_text.length).toBeGreaterThan(10);
    const message = response.output[0];
    expect(message).toMatchObject({ type: "message", role: "assistant", status: "completed" });
    if (message.type !== "message") throw new Error("expected a message");
    expect(message.content[0]).toMatchObject({ type: "output_text", annotations: [] });
    const usage = response.usage!;
    expect(usage.total_tokens).toBe(usage.input_tokens + usage.output_tokens);
    expect(usage.input_tokens_details.cached_tokens).toBeGreaterThanOrEqual(0);
    expect(usage.output_tokens_details.reasoning_tokens).toBe(0);
  });

  test("when max_output_tokens is reached, then the status is incomplete with reason max_output_tokens", async () => {
    const client = openaiClient(server.url, caller.key);
    const response = await client.responses.create({ model: CHAT_MODEL, input: "Lily", max_output_tokens: 16 });
    expect(response.status).toBe("incomplete");
    expect(response.incomplete_details).toEqual({ reason: "max_output_tokens" });
    expect(response.usage!.output_tokens).toBe(16);
  });

  test("when input is a list of messages with instructions, then it is accepted", async () => {
    const client = openaiClient(server.url, caller.key);
    const response = await client.responses.create({
      model: CHAT_MODEL,
      instructions: "Tell a story.",
      input: [
        { role: "user", content: "Once upon a time" },
        { role: "assistant", content: "there was a dog." },
        { role: "user", content: [{ type: "input_text", text: "The dog" }] },
      ],
      max_output_tokens: 20,
    });
    expect(response.output_text.length).toBeGreaterThan(0);
  });

  test("when service_tier is flex, then the response says flex", async () => {
    const res = await http(server.url, "POST", "/v1/responses", {
      token: caller.key,
      body: { model: CHAT_MODEL, input: "Tom", max_output_tokens: 16, service_tier: "flex" },
    });
    expect(res.status).toBe(200);
    expect(res.body.service_tier).toBe("flex");
  });

  test("when streaming, then the events run from response.created to response.completed with the text", async () => {
    const client = openaiClient(server.url, caller.key);
    const stream = await client.responses.create({
      model: CHAT_MODEL,
      input: "Once upon a time",
      temperature: 0,
      max_output_tokens: 24,
      stream: true,
    });
    const types: string[] = [];
    let text = "";
    let final: { id: string; status?: string } | undefined;
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === "response.output_text.delta") text += event.delta;
      if (event.type === "response.completed" || event.type === "response.incomplete") final = event.response;
    }
    expect(types.slice(0, 4)).toEqual([
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.content_part.added",
    ]);
    expect(types.slice(-4)).toEqual([
      "response.output_text.done",
      "response.content_part.done",
      "response.output_item.done",
      "response.incomplete",
    ]);
    expect(text.length).toBeGreaterThan(0);
    expect(final?.status).toBe("incomplete");
    const stored = await client.responses.retrieve(final!.id);
    expect(stored.output_text).toBe(text);
  });
});

describe("stored responses", () => {
  test("when store is default, then GET returns the same object", async () => {
    const client = openaiClient(server.url, caller.key);
    const created = await client.responses.create({ model: CHAT_MODEL, input: "Ben", max_output_tokens: 16 });
    const fetched = await client.responses.retrieve(created.id);
    expect(fetched).toEqual(created);
    const [row] = await server.db<any>("SELECT team_id, status FROM responses WHERE id = $1", [created.id]);
    expect(row).toEqual({ team_id: caller.teamId, status: "incomplete" });
  });

  test("when store is false, then the response is not kept but the request is metered", async () => {
    const client = openaiClient(server.url, caller.key);
    const created = await client.responses.create({
      model: CHAT_MODEL,
      input: "Sue",
      max_output_tokens: 16,
      store: false,
    });
    expectEnvelope(await http(server.url, "GET", `/v1/responses/${created.id}`, { token: caller.key }), 404);
    const [activity] = await server.db<any>("SELECT status, body_json, result_json FROM activity WHERE id = $1", [
      created.id,
    ]);
    expect(activity).toEqual({ status: "completed", body_json: null, result_json: null });
  });

  test("when another team asks for a response, then 404", async () => {
    const created = await http(server.url, "POST", "/v1/responses", {
      token: caller.key,
      body: { model: CHAT_MODEL, input: "Max", max_output_tokens: 16 },
    });
    const other = await createTestCaller(server.url);
    expectEnvelope(await http(server.url, "GET", `/v1/responses/${created.body.id}`, { token: other.key }), 404);
    expect((await http(server.url, "GET", `/v1/responses/${created.body.id}`, { token: caller.key })).status).toBe(200);
  });

  test("when the id is not a uuid, then 400; without credentials, then 401", async () => {
    expectInvalid(await http(server.url, "GET", "/v1/responses/abc", { token: caller.key }), "response_id");
    expectEnvelope(await http(server.url, "GET", `/v1/responses/${crypto.randomUUID()}`), 401);
  });
});

describe("listing and deleting stored responses", () => {
  test("when listed, then the team's responses come newest first with has_more past the limit", async () => {
    const owner = await createTestCaller(server.url);
    const streamId = crypto.randomUUID();
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const res = await http(server.url, "POST", "/v1/responses", {
        token: owner.key,
        body: {
          model: CHAT_MODEL,
          input: "Tom",
          max_output_tokens: 16,
          metadata: i < 2 ? { stream_id: streamId } : {},
        },
      });
      ids.push(res.body.id);
    }
    await http(server.url, "POST", "/v1/responses", {
      token: owner.key,
      body: { model: CHAT_MODEL, input: "Tom", max_output_tokens: 16, store: false },
    });
    const all = await http(server.url, "GET", "/v1/responses", { token: owner.key });
    expect(all.status).toBe(200);
    expect(all.body).toEqual({
      object: "list",
      data: [...ids].reverse().map((id) => ({
        id,
        object: "response",
        created_at: expect.any(Number),
        model: CHAT_MODEL,
        status: "incomplete",
      })),
      has_more: false,
    });
    const page = await http(server.url, "GET", "/v1/responses?limit=2", { token: owner.key });
    expect(page.body.data.map((r: { id: string }) => r.id)).toEqual([ids[2], ids[1]]);
    expect(page.body.has_more).toBe(true);
    const inStream = await http(server.url, "GET", `/v1/responses?stream_id=${streamId}`, { token: owner.key });
    expect(inStream.body.data.map((r: { id: string }) => r.id)).toEqual([ids[1], ids[0]]);
    const stranger = await createTestCaller(server.url);
    expect((await http(server.url, "GET", "/v1/responses", { token: stranger.key })).body.data).toEqual([]);
  });

  test("when the list query is out of range, then 400; without credentials, then 401", async () => {
    expectInvalid(await http(server.url, "GET", "/v1/responses?limit=0", { token: caller.key }), "limit");
    expectInvalid(await http(server.url, "GET", "/v1/responses?limit=1001", { token: caller.key }), "limit");
    expectInvalid(await http(server.url, "GET", "/v1/responses?limit=ten", { token: caller.key }), "limit");
    expectInvalid(await http(server.url, "GET", "/v1/responses?stream_id=abc", { token: caller.key }), "stream_id");
    // `null` is not special (issue 28, item 4): not a uuid.
    expectInvalid(await http(server.url, "GET", "/v1/responses?stream_id=null", { token: caller.key }), "stream_id");
    expectEnvelope(await http(server.url, "GET", "/v1/responses"), 401);
  });

  test("when deleted, then the object comes back as it stood and later reads are 404", async () => {
    const client = openaiClient(server.url, caller.key);
    const created = await client.responses.create({ model: CHAT_MODEL, input: "Lily", max_output_tokens: 16 });
    const other = await createTestCaller(server.url);
    expectEnvelope(await http(server.url, "DELETE", `/v1/responses/${created.id}`, { token: other.key }), 404);
    const deleted = await http(server.url, "DELETE", `/v1/responses/${created.id}`, { token: caller.key });
    expect(deleted.status).toBe(200);
    const { output_text: _sdkAddition, ...wire } = created;
    expect(deleted.body).toEqual(JSON.parse(JSON.stringify(wire)));
    expectEnvelope(await http(server.url, "GET", `/v1/responses/${created.id}`, { token: caller.key }), 404);
    expectEnvelope(await http(server.url, "DELETE", `/v1/responses/${created.id}`, { token: caller.key }), 404);
    // The request stays metered: deleting the stored object does not undo its activity or charge.
    const [activity] = await server.db<any>("SELECT status FROM activity WHERE id = $1", [created.id]);
    expect(activity.status).toBe("completed");
  });

  test("when the id is not a uuid, then DELETE answers 400; without credentials, then 401", async () => {
    expectInvalid(await http(server.url, "DELETE", "/v1/responses/abc", { token: caller.key }), "response_id");
    expectEnvelope(await http(server.url, "DELETE", `/v1/responses/${crypto.randomUUID()}`), 401);
  });
});

describe("response errors", () => {
  const post = (body: unknown, token = caller.key) => http(server.url, "POST", "/v1/responses", { token, body });

  test("when input or model is missing or mistyped, then 400 names the field", async () => {
    expectInvalid(await post({ model: CHAT_MODEL }), "input");
    expectInvalid(await post({ input: "hi" }), "model");
    expectInvalid(await post({ model: CHAT_MODEL, input: 42 }), "input");
    expectInvalid(await post({ model: CHAT_MODEL, input: "hi", temperature: 2.5 }), "temperature");
    expectInvalid(await post({ model: CHAT_MODEL, input: "hi", top_p: 2 }), "top_p");
    expectInvalid(await post({ model: CHAT_MODEL, input: "hi", max_output_tokens: 0 }), "max_output_tokens");
    expectInvalid(await post({ model: CHAT_MODEL, input: "hi", store: "yes" }), "store");
    expectInvalid(await post({ model: CHAT_MODEL, input: "hi", max_queue_wait_s: 1 }), "max_queue_wait_s");
    expectInvalid(await post({ model: CHAT_MODEL, input: "hi", metadata: "x" }), "metadata");
    expectInvalid(
      await post({ model: CHAT_MODEL, input: "hi", metadata: { completion_window: "1h" } }),
      "metadata.completion_window",
    );
  });

  test("when background is asked for with store: false, then 400 names store and nothing is stored", async () => {
    const before = await server.db<any>("SELECT count(*)::int AS n FROM responses");
    expectInvalid(await post({ model: CHAT_MODEL, input: "hi", background: true, store: false }), "store");
    const after = await server.db<any>("SELECT count(*)::int AS n FROM responses");
    expect(after[0].n).toBe(before[0].n);
  });

  test("when the model is unknown, then 404", async () => {
    expectEnvelope(await post({ model: "gpt-nope", input: "hi" }), 404);
  });

  test("when the key is missing or revoked, then 401", async () => {
    expectEnvelope(await post({ model: CHAT_MODEL, input: "hi" }, ""), 401);
    const other = await createTestCaller(server.url);
    expect((await post({ model: CHAT_MODEL, input: "hi", max_output_tokens: 16 }, other.key)).status).toBe(200);
    const revoke = await http(server.url, "DELETE", `/control/v1/auth/api-keys/${other.keyId}`, { token: other.token });
    expect(revoke.status).toBe(204);
    expectEnvelope(await post({ model: CHAT_MODEL, input: "hi" }, other.key), 401);
  });
});
