/**
 * Bounds on inference input (issue 5, item 1): what cannot fit is refused before it is tokenized,
 * and counts and lengths that would cost work before any token are bounded. Refusals are 400s that
 * record nothing and charge nothing.
 */
import {
  CHAT_MODEL,
  EMBED_MODEL,
  type TestServer,
  anthropicClient,
  createTestCaller,
  expectInvalid,
  http,
  startTestServer,
} from "./support/harness.js";

let server: TestServer;
let caller: Awaited<ReturnType<typeof createTestCaller>>;
beforeAll(async () => {
  server = await startTestServer();
  caller = await createTestCaller(server.url);
});
afterAll(() => server.close());

async function nothingRecorded(): Promise<void> {
  await server.app.metering.drainAll();
  const [row] = await server.db<any>("SELECT count(*)::int AS n FROM activity WHERE team_id = $1", [caller.teamId]);
  expect(row.n).toBe(0);
}

test("when a chat prompt is 7 MiB, then 400 context_length_exceeded on messages and nothing is recorded", async () => {
  const huge = "Once upon a time ".repeat(Math.ceil((7 * 1024 * 1024) / 17));
  const res = await http(server.url, "POST", "/v1/chat/completions", {
    token: caller.key,
    body: { model: CHAT_MODEL, messages: [{ role: "user", content: huge }], max_tokens: 4 },
  });
  expectInvalid(res, "messages");
  expect(res.body.extra[0].message).toBe("context_length_exceeded");
  await nothingRecorded();
});

test("when a prompt is just over what the context can hold, then it is refused; just under, it is served", async () => {
  const over = await http(server.url, "POST", "/v1/chat/completions", {
    token: caller.key,
    body: { model: CHAT_MODEL, messages: [{ role: "user", content: "Tom ran. ".repeat(2_000) }], max_tokens: 4 },
  });
  expectInvalid(over, "messages");
  const under = await http(server.url, "POST", "/v1/chat/completions", {
    token: caller.key,
    body: { model: CHAT_MODEL, messages: [{ role: "user", content: "Tom ran. ".repeat(20) }], max_tokens: 4 },
  });
  expect(under.status).toBe(200);
  await server.db("DELETE FROM activity WHERE team_id = $1", [caller.teamId]);
});

test("when an embeddings input is 7 MiB, then 400 naming the input", async () => {
  const res = await http(server.url, "POST", "/v1/embeddings", {
    token: caller.key,
    body: { model: EMBED_MODEL, input: ["a ball", "x".repeat(7 * 1024 * 1024)] },
  });
  expectInvalid(res, "input[1]");
  await nothingRecorded();
});

test("when an embeddings request has 2,049 inputs, then 400 naming input", async () => {
  const res = await http(server.url, "POST", "/v1/embeddings", {
    token: caller.key,
    body: { model: EMBED_MODEL, input: Array.from({ length: 2049 }, () => "a") },
  });
  expectInvalid(res, "input");
});

test("when there are more than 10,000 messages, then 400 naming messages", async () => {
  const messages = Array.from({ length: 10_001 }, () => ({ role: "user", content: "a" }));
  const res = await http(server.url, "POST", "/v1/chat/completions", {
    token: caller.key,
    body: { model: CHAT_MODEL, messages, max_tokens: 4 },
  });
  expectInvalid(res, "messages");
  await nothingRecorded();
});

test("when stop sequences are too many or too long, then 400 naming them in the request's own words", async () => {
  const many = await http(server.url, "POST", "/v1/messages", {
    token: caller.key,
    body: {
      model: CHAT_MODEL,
      max_tokens: 4,
      messages: [{ role: "user", content: "Tom" }],
      stop_sequences: Array.from({ length: 17 }, (_, i) => `s${i}`),
    },
  });
  expectInvalid(many, "stop_sequences");
  const long = await http(server.url, "POST", "/v1/chat/completions", {
    token: caller.key,
    body: { model: CHAT_MODEL, max_tokens: 4, messages: [{ role: "user", content: "Tom" }], stop: ["x".repeat(1001)] },
  });
  expectInvalid(long, "stop[0]");
  // The official client sees the same 400.
  const err = await anthropicClient(server.url, caller.key)
    .messages.create({
      model: CHAT_MODEL,
      max_tokens: 4,
      messages: [{ role: "user", content: "Tom" }],
      stop_sequences: Array.from({ length: 17 }, (_, i) => `s${i}`),
    })
    .catch((e: { status?: number }) => e);
  expect((err as { status?: number }).status).toBe(400);
  await nothingRecorded();
});

test("when a body has a million small members or values, then 400 before it is parsed", async () => {
  const members = `{"model":"${CHAT_MODEL}","messages":[{"role":"user","content":"Tom"}],"metadata":{${Array.from(
    { length: 200_000 },
    (_, i) => `"k${i}":0`,
  ).join(",")}}}`;
  const many = await http(server.url, "POST", "/v1/chat/completions", { token: "sk_wrong", body: members });
  expectInvalid(many, "body"); // refused before authentication: nothing was parsed
  const values = `{"model":"${EMBED_MODEL}","input":[${Array.from({ length: 600_000 }, () => "5").join(",")}]}`;
  expectInvalid(await http(server.url, "POST", "/v1/embeddings", { token: caller.key, body: values }), "body");
});

test("when a body has thousands of invalid items, then the 400 names the first ones only", async () => {
  const messages = Array.from({ length: 9_000 }, () => ({ role: 5, content: 5 }));
  const res = await http(server.url, "POST", "/v1/chat/completions", {
    token: caller.key,
    body: { model: CHAT_MODEL, messages },
  });
  expectInvalid(res, "messages[0].role");
  expect(res.body.extra.length).toBeLessThanOrEqual(50);
  expect(res.body.detail).toMatch(/and more/);
});

test("when an embeddings input fills the whole context, then 400, not an engine failure", async () => {
  const res = await http(server.url, "POST", "/v1/embeddings", {
    token: caller.key,
    body: { model: EMBED_MODEL, input: [Array.from({ length: 511 }, () => 5)] },
  });
  expectInvalid(res, "input");
  const ok = await http(server.url, "POST", "/v1/embeddings", {
    token: caller.key,
    body: { model: EMBED_MODEL, input: [Array.from({ length: 509 }, () => 5)] },
  });
  expect(ok.status).toBe(200);
  await server.db("DELETE FROM activity WHERE team_id = $1", [caller.teamId]);
});
