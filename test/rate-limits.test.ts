/**
 * Per-team, per-model rate limits (issue 9, item 5; spec: Limits, "Per-model throughput"): the
 * catalog's `rpm_limit`, `tpm_limit` and `requests_per_hour`, enforced with 429 + `Retry-After`
 * across two API servers sharing one database; refused requests are not charged; models without
 * limits never touch the counters.
 */
import {
  CHAT_MODEL,
  EMBED_MODEL,
  type TestServer,
  createTestCaller,
  expectEnvelope,
  http,
  openaiClient,
  startTestServer,
} from "./support/harness.js";
import { writePatchedCatalog } from "./support/test-catalog.js";

let a: TestServer;
let b: TestServer;

const catalogPath = writePatchedCatalog({
  [CHAT_MODEL]: { rpm_limit: 30 },
  [EMBED_MODEL]: { tpm_limit: 40, requests_per_hour: 6 },
});

beforeAll(async () => {
  a = await startTestServer({ catalogPath });
  b = await startTestServer({ catalogPath }, a);
}, 60_000);
afterAll(async () => {
  await b?.close();
  await a?.close();
});

const chat = { model: CHAT_MODEL, messages: [{ role: "user", content: "Tom" }], max_tokens: 1, temperature: 0 };

/** Waits for a fresh minute by the database clock when fewer than 20 s of this one are left. */
async function freshMinute(): Promise<void> {
  const [row] = await a.db<{ s: number }>("SELECT extract(second FROM now())::float8 AS s");
  if (row.s > 40) await new Promise((r) => setTimeout(r, (60.2 - row.s) * 1000));
}

async function usageRows(teamId: string): Promise<number> {
  const [row] = await a.db<{ n: string }>("SELECT count(*) AS n FROM activity WHERE team_id = $1", [teamId]);
  return Number(row.n);
}

test("when a team makes its 31st request in a minute at rpm 30, split over two servers, then it gets 429 with Retry-After, is not charged, and background creates are refused too", async () => {
  const caller = await createTestCaller(a.url);
  await freshMinute();
  for (let i = 0; i < 30; i++) {
    const res = await http(i % 2 ? b.url : a.url, "POST", "/v1/chat/completions", { token: caller.key, body: chat });
    expect(res.status).toBe(200);
  }
  const [ledger] = await a.db<{ n: string }>("SELECT count(*) AS n FROM credit_ledger WHERE team_id = $1", [
    caller.teamId,
  ]);
  const refused = await http(b.url, "POST", "/v1/chat/completions", { token: caller.key, body: chat });
  expectEnvelope(refused, 429);
  expect(refused.body.extra).toEqual({ limit: "rpm_limit", model: CHAT_MODEL });
  const retryAfter = Number(refused.headers.get("retry-after"));
  expect(retryAfter).toBeGreaterThanOrEqual(1);
  expect(retryAfter).toBeLessThanOrEqual(60);
  expect(await usageRows(caller.teamId)).toBe(30);
  const [after] = await a.db<{ n: string }>("SELECT count(*) AS n FROM credit_ledger WHERE team_id = $1", [
    caller.teamId,
  ]);
  expect(after.n).toBe(ledger.n);

  // The other server, the official client, and a background create: all refused alike.
  const client = openaiClient(a.url, caller.key);
  await expect(client.chat.completions.create(chat as never)).rejects.toMatchObject({ status: 429 });
  const background = await http(a.url, "POST", "/v1/responses", {
    token: caller.key,
    body: { model: CHAT_MODEL, input: "Tom", max_output_tokens: 1, background: true },
  });
  expectEnvelope(background, 429);
  const [stored] = await a.db<{ n: string }>("SELECT count(*) AS n FROM responses WHERE team_id = $1", [caller.teamId]);
  expect(stored.n).toBe("0");

  // Another team is not affected.
  const other = await createTestCaller(b.url);
  expect((await http(b.url, "POST", "/v1/chat/completions", { token: other.key, body: chat })).status).toBe(200);
}, 120_000);

test("when a team's requests used the minute's tokens (tpm), then the next request is refused naming tpm_limit", async () => {
  const caller = await createTestCaller(a.url);
  await freshMinute();
  const long = "Once upon a time there was a little girl named Lily who loved to play outside in the park. ".repeat(2);
  const first = await http(a.url, "POST", "/v1/embeddings", {
    token: caller.key,
    body: { model: EMBED_MODEL, input: long },
  });
  expect(first.status).toBe(200);
  expect(first.body.usage.prompt_tokens).toBeGreaterThanOrEqual(40);
  // Tokens are counted just after the answer; give that write a moment.
  let refused = await http(b.url, "POST", "/v1/embeddings", {
    token: caller.key,
    body: { model: EMBED_MODEL, input: "a" },
  });
  for (let i = 0; i < 50 && refused.status === 200; i++) {
    await new Promise((r) => setTimeout(r, 50));
    refused = await http(b.url, "POST", "/v1/embeddings", {
      token: caller.key,
      body: { model: EMBED_MODEL, input: "a" },
    });
  }
  expectEnvelope(refused, 429);
  expect(refused.body.extra).toEqual({ limit: "tpm_limit", model: EMBED_MODEL });
});

test("when a team reaches requests_per_hour, then the next request is refused naming it, with Retry-After up to the hour's end", async () => {
  const caller = await createTestCaller(a.url);
  const embed = { model: EMBED_MODEL, input: "a" };
  for (let i = 0; i < 6; i++) {
    const res = await http(i % 2 ? a.url : b.url, "POST", "/v1/embeddings", { token: caller.key, body: embed });
    expect(res.status).toBe(200);
  }
  const refused = await http(a.url, "POST", "/v1/embeddings", { token: caller.key, body: embed });
  expectEnvelope(refused, 429);
  expect(refused.body.extra).toEqual({ limit: "requests_per_hour", model: EMBED_MODEL });
  const retryAfter = Number(refused.headers.get("retry-after"));
  expect(retryAfter).toBeGreaterThanOrEqual(1);
  expect(retryAfter).toBeLessThanOrEqual(3600);
});

test("when a model has no limits, then requests never touch the rate-limit counters", async () => {
  const unlimited = await startTestServer({}, a);
  try {
    const caller = await createTestCaller(unlimited.url);
    expect((await http(unlimited.url, "POST", "/v1/chat/completions", { token: caller.key, body: chat })).status).toBe(
      200,
    );
    const rows = await a.db("SELECT 1 FROM rate_limit_windows WHERE team_id = $1", [caller.teamId]);
    expect(rows).toEqual([]);
  } finally {
    await unlimited.close();
  }
});
