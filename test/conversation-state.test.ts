/**
 * Conversation state on Responses (issue 26, item 4) through the official `openai` client:
 * `previous_response_id` makes the earlier response's input and output the history (its
 * `instructions` are not carried over), is echoed on the response, counts the whole history in
 * usage, works for background responses too, and refuses another team's id (404), an unstored
 * response (400), a malformed id (400) and a chain that includes a deleted response (400, issue 26
 * review, finding 15), but not one longer than the 100 responses read back.
 */
import { randomUUID } from "node:crypto";
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
import { batchResults } from "./support/inference.js";

let server: TestServer;
let caller: Awaited<ReturnType<typeof createTestCaller>>;

beforeAll(async () => {
  server = await startTestServer();
  caller = await createTestCaller(server.url);
});
afterAll(() => server.close());

const greedy = { model: CHAT_MODEL, max_output_tokens: 12, temperature: 0 };

describe("previous_response_id", () => {
  test("when a response continues another, then its prompt is the earlier input and output plus the new input, without the earlier instructions", async () => {
    const client = openaiClient(server.url, caller.key);
    const first = await client.responses.create({
      ...greedy,
      instructions: "You tell short stories about a dog named Max who likes to run in the park.",
      input: "Once upon a time",
    });
    const second = await client.responses.create({ ...greedy, input: "Then", previous_response_id: first.id });
    expect(second.previous_response_id).toBe(first.id);
    expect(second.status).toBe("incomplete"); // cut at max_output_tokens
    // The same conversation written out by hand costs exactly the same prompt tokens.
    const explicit = await client.responses.create({
      ...greedy,
      input: [
        { role: "user", content: "Once upon a time" },
        { role: "assistant", content: first.output_text },
        { role: "user", content: "Then" },
      ],
    });
    expect(second.usage!.input_tokens).toBe(explicit.usage!.input_tokens);
    expect(second.output_text).toBe(explicit.output_text);
    expect(second.usage!.input_tokens).toBeLessThan(first.usage!.input_tokens + first.usage!.output_tokens + 4);

    // A third turn walks the whole chain.
    const third = await client.responses.create({ ...greedy, input: "And", previous_response_id: second.id });
    const explicit3 = await client.responses.create({
      ...greedy,
      input: [
        { role: "user", content: "Once upon a time" },
        { role: "assistant", content: first.output_text },
        { role: "user", content: "Then" },
        { role: "assistant", content: second.output_text },
        { role: "user", content: "And" },
      ],
    });
    expect(third.usage!.input_tokens).toBe(explicit3.usage!.input_tokens);
    expect((await client.responses.retrieve(third.id)).previous_response_id).toBe(second.id);
  });

  test("when a background response continues another, then it runs with the history", async () => {
    const client = openaiClient(server.url, caller.key);
    const first = await client.responses.create({ ...greedy, input: "Once upon a time" });
    const submitted = await client.responses.create({
      ...greedy,
      input: "Then",
      previous_response_id: first.id,
      background: true,
    });
    expect(submitted.previous_response_id).toBe(first.id);
    let done = submitted;
    for (let i = 0; i < 200 && done.status === "in_progress"; i++) {
      await new Promise((r) => setTimeout(r, 100));
      done = await client.responses.retrieve(submitted.id);
    }
    expect(done.status).toBe("incomplete");
    const sync = await client.responses.create({ ...greedy, input: "Then", previous_response_id: first.id });
    expect(done.usage!.input_tokens).toBe(sync.usage!.input_tokens);
  });

  test("when the earlier response was not stored, then 400 says it cannot be continued", async () => {
    const client = openaiClient(server.url, caller.key);
    const unstored = await client.responses.create({ ...greedy, input: "Once upon a time", store: false });
    const res = await http(server.url, "POST", "/v1/responses", {
      token: caller.key,
      body: { ...greedy, input: "Then", previous_response_id: unstored.id },
    });
    expectInvalid(res, "previous_response_id");
    expect(res.body.detail).toContain("store: false");
  });

  test("when the id is another team's or unknown, then 404; when malformed, then 400", async () => {
    const other = await createTestCaller(server.url);
    const theirs = await openaiClient(server.url, other.key).responses.create({ ...greedy, input: "Once" });
    const res = await http(server.url, "POST", "/v1/responses", {
      token: caller.key,
      body: { ...greedy, input: "Then", previous_response_id: theirs.id },
    });
    expectEnvelope(res, 404);
    const unknown = await http(server.url, "POST", "/v1/responses", {
      token: caller.key,
      body: { ...greedy, input: "Then", previous_response_id: "0190c8d2-0000-7000-8000-000000000000" },
    });
    expectEnvelope(unknown, 404);
    const malformed = await http(server.url, "POST", "/v1/responses", {
      token: caller.key,
      body: { ...greedy, input: "Then", previous_response_id: "resp_123" },
    });
    expectInvalid(malformed, "previous_response_id");
  });

  test("when a batch item continues a stored response, then it runs with that conversation before its input", async () => {
    const client = openaiClient(server.url, caller.key);
    const first = await client.responses.create({
      ...greedy,
      input: "Once upon a time",
      instructions: "Tell a story.",
    });
    const created = await http(server.url, "POST", "/v1/batches", {
      token: caller.key,
      body: {
        requests: [
          {
            custom_id: "next",
            url: "/v1/responses",
            body: { ...greedy, input: "Then", previous_response_id: first.id },
          },
          { custom_id: "alone", url: "/v1/responses", body: { ...greedy, input: "Then" } },
        ],
      },
    });
    expect(created.status).toBe(201);
    const results = await batchResults(server.url, caller.key, created.body.id);
    const [next, alone] = results!;
    expect(next.status).toBe("completed");
    // The earlier input and answer (not its instructions: OpenAI's rule) come before "Then".
    const [item] = await server.db<{ body_json: any }>(
      "SELECT body_json FROM batch_items WHERE batch_id = $1 AND custom_id = 'next'",
      [created.body.id],
    );
    expect(item.body_json.messages).toEqual([
      { role: "user", content: "Once upon a time" },
      { role: "assistant", content: first.output_text },
      { role: "user", content: "Then" },
    ]);
    expect(next.result_json.usage.prompt_tokens).toBeGreaterThan(alone.result_json.usage.prompt_tokens);
  });

  test("when a batch item names an unknown or another team's previous response, then the batch is refused naming the field", async () => {
    const other = await createTestCaller(server.url);
    const theirs = await openaiClient(server.url, other.key).responses.create({ ...greedy, input: "Secret" });
    const res = await http(server.url, "POST", "/v1/batches", {
      token: caller.key,
      body: {
        requests: [
          {
            url: "/v1/responses",
            body: { ...greedy, input: "x", previous_response_id: "0190c8d2-0000-7000-8000-000000000000" },
          },
          { url: "/v1/responses", body: { ...greedy, input: "x", previous_response_id: theirs.id } },
        ],
      },
    });
    expectInvalid(res, "requests[0].body.previous_response_id");
    expectInvalid(res, "requests[1].body.previous_response_id");
    expect(JSON.stringify(res.body)).not.toContain("Secret");
  });

  test("when a response the chain continues was deleted, then continuing is refused naming previous_response_id and that response, never run on a shorter history", async () => {
    const client = openaiClient(server.url, caller.key);
    const first = await client.responses.create({ ...greedy, input: "Once upon a time" });
    const second = await client.responses.create({ ...greedy, input: "Then", previous_response_id: first.id });
    await client.responses.delete(first.id);
    const continued = { ...greedy, input: "And", previous_response_id: second.id };
    const sync = await http(server.url, "POST", "/v1/responses", { token: caller.key, body: continued });
    expectInvalid(sync, "previous_response_id");
    expect(sync.body.detail).toContain(first.id);
    expect(sync.body.extra[0].message).toContain("deleted");
    const background = await http(server.url, "POST", "/v1/responses", {
      token: caller.key,
      body: { ...continued, background: true },
    });
    expectInvalid(background, "previous_response_id");
    const batch = await http(server.url, "POST", "/v1/batches", {
      token: caller.key,
      body: { requests: [{ url: "/v1/responses", body: continued }] },
    });
    expectInvalid(batch, "requests[0].body.previous_response_id");
    expect(batch.body.extra[0].message).toContain(first.id);
    // The deleted one itself: unknown, as before.
    const deleted = await http(server.url, "POST", "/v1/responses", {
      token: caller.key,
      body: { ...greedy, input: "And", previous_response_id: first.id },
    });
    expectEnvelope(deleted, 404);
  });

  test("when a chain is longer than the responses read back, then it is continued (the cap is not a deleted response)", async () => {
    const client = openaiClient(server.url, caller.key);
    const first = await client.responses.create({ ...greedy, input: "Once upon a time" });
    // MAX_CHAIN (100) more responses, each continuing the one before, written as the service stores them.
    const ids = Array.from({ length: 100 }, () => randomUUID());
    await server.db(
      `INSERT INTO responses (id, team_id, user_id, api_key_id, model, status, request_json, response_json, created_at)
       SELECT n.id, r.team_id, r.user_id, r.api_key_id, r.model, r.status,
              r.request_json || jsonb_build_object('previous_response_id', n.prev),
              r.response_json || jsonb_build_object('id', n.id), r.created_at
         FROM responses r, unnest($2::uuid[], $3::text[]) AS n(id, prev) WHERE r.id = $1`,
      [first.id, ids, [first.id, ...ids.slice(0, -1)]],
    );
    // Submitted in the background: the conversation is checked at submission (101 turns would not
    // fit the tiny model's context when run).
    const res = await http(server.url, "POST", "/v1/responses", {
      token: caller.key,
      body: { ...greedy, input: "And", previous_response_id: ids.at(-1), background: true },
    });
    expect(res.status).toBe(200);
    expect(res.body.previous_response_id).toBe(ids.at(-1));
  });

  test("when the key is missing, then 401", async () => {
    const res = await http(server.url, "POST", "/v1/responses", {
      body: { ...greedy, input: "Then", previous_response_id: "0190c8d2-0000-7000-8000-000000000000" },
    });
    expectEnvelope(res, 401);
  });
});
