/**
 * Credit reservations (DESIGN §3 Money; issue 5, item 2): a request starts only when its worst
 * case is covered by credit not promised to other in-flight requests, in every process; it
 * settles at its real cost. Two API processes on one database, with a catalog whose prices make
 * every token count (1 µUSD per prompt token, 10 per completion token).
 */
import { readFileSync, writeFileSync } from "node:fs";
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { packageRoot } from "../src/config/config.js";
import {
  CHAT_MODEL,
  EMBED_MODEL,
  type TestServer,
  createTestCaller,
  eventually,
  expectEnvelope,
  http,
  startTestServer,
} from "./support/harness.js";

/** The default catalog with prices in whole µUSD per token. */
function pricedCatalog(): string {
  const catalog = JSON.parse(readFileSync(path.join(packageRoot, "src/config/catalog.json"), "utf8"));
  for (const m of catalog.models) {
    m.pricing =
      m.modality === "text_embedding"
        ? { input_per_million_usd: 1, output_per_million_usd: 0, cached_input_per_million_usd: 1 }
        : { input_per_million_usd: 1, output_per_million_usd: 10, cached_input_per_million_usd: 0.5 };
  }
  const file = path.join(mkdtempSync(path.join(os.tmpdir(), "switchyard-catalog-")), "catalog.json");
  writeFileSync(file, JSON.stringify(catalog));
  return file;
}

let a: TestServer;
let b: TestServer;

beforeAll(async () => {
  const catalogPath = pricedCatalog();
  a = await startTestServer({ catalogPath, engineSequences: 4 });
  b = await startTestServer({ catalogPath, engineSequences: 4 }, a);
});
afterAll(async () => {
  await b.close();
  await a.close();
});

const chat = (maxTokens?: number) => ({
  model: CHAT_MODEL,
  messages: [{ role: "user", content: "Once upon a time" }],
  temperature: 0,
  ...(maxTokens === undefined ? {} : { max_tokens: maxTokens }),
});

/** Sets the team's balance to `micros` with an adjustment on the ledger, so both keep adding up. */
async function setBalance(teamId: string, micros: number): Promise<void> {
  await a.db(
    `INSERT INTO credit_ledger (id, team_id, type, amount_micros, balance_after_micros, source_id)
     SELECT gen_random_uuid(), id, 'adjustment', $2::bigint - credit_balance_micros, $2::bigint, gen_random_uuid()::text
       FROM teams WHERE id = $1`,
    [teamId, micros],
  );
  await a.db("UPDATE teams SET credit_balance_micros = $2::bigint WHERE id = $1", [teamId, micros]);
}

async function ledgerAddsUp(teamId: string): Promise<{ balance: bigint; ledgerSum: bigint }> {
  const [row] = await a.db<any>(
    `SELECT (SELECT credit_balance_micros FROM teams WHERE id = $1) AS balance,
            (SELECT coalesce(sum(amount_micros), 0) FROM credit_ledger WHERE team_id = $1) AS sum`,
    [teamId],
  );
  return { balance: BigInt(row.balance), ledgerSum: BigInt(row.sum) };
}

test("when 100 requests race through two processes for credit that covers about 20, then every 200 is charged in full and the rest get 402", async () => {
  const caller = await createTestCaller(a.url);
  // Worst case per request: 6 prompt tokens × 1 + 8 completion tokens × 10 = 86 µUSD.
  const grant = 20 * 86;
  await setBalance(caller.teamId, grant);
  const answers = await Promise.all(
    Array.from({ length: 100 }, (_, i) =>
      http(i % 2 === 0 ? a.url : b.url, "POST", "/v1/chat/completions", {
        token: caller.key,
        body: { ...chat(8), metadata: { custom_id: `race-${i}` } },
      }),
    ),
  );
  const ok = answers.filter((r) => r.status === 200);
  const refused = answers.filter((r) => r.status !== 200);
  expect(ok.length).toBeGreaterThanOrEqual(10);
  for (const r of refused) expectEnvelope(r, 402);

  await a.app.metering.drainAll();
  await b.app.metering.drainAll();
  const rows = await a.db<any>(
    `SELECT a.custom_id, a.prompt_tokens, a.cached_prompt_tokens, a.completion_tokens, a.cost_micros,
            l.amount_micros, l.description
       FROM activity a LEFT JOIN credit_ledger l ON l.type = 'usage' AND l.source_id = a.id::text
      WHERE a.team_id = $1`,
    [caller.teamId],
  );
  expect(rows).toHaveLength(ok.length); // refusals leave no record
  let charged = 0n;
  for (const row of rows) {
    // uncached × 1 + cached × 0.5 + completion × 10 µUSD, rounded half up once.
    const cached = BigInt(row.cached_prompt_tokens);
    const halves = 2n * (BigInt(row.prompt_tokens) - cached) + cached + 20n * BigInt(row.completion_tokens);
    const cost = (halves + 1n) / 2n;
    expect(BigInt(row.cost_micros)).toBe(cost);
    expect(BigInt(row.amount_micros)).toBe(-cost); // charged in full, never capped
    expect(row.description).not.toContain("capped");
    charged += cost;
  }
  expect(charged).toBeLessThanOrEqual(BigInt(grant));
  const { balance, ledgerSum } = await ledgerAddsUp(caller.teamId);
  expect(balance).toBeGreaterThanOrEqual(0n);
  expect(balance).toBe(ledgerSum);
  expect(balance).toBe(BigInt(grant) - charged);
  // The database invariant: the balance covers every lease (charges came off the leases too).
  const [leases] = await a.db<any>(
    "SELECT coalesce(sum(micros), 0) AS micros FROM credit_leases WHERE team_id = $1 AND expires_at > now()",
    [caller.teamId],
  );
  expect(BigInt(leases.micros)).toBeLessThanOrEqual(balance);
});

test("when the worst case is not covered, then 402 says what is available and a smaller max_tokens fits", async () => {
  const caller = await createTestCaller(a.url);
  await setBalance(caller.teamId, 1000);
  // Without max_tokens the worst case is the rest of the 512-token context: about 5,000 µUSD.
  const refused = await http(a.url, "POST", "/v1/chat/completions", { token: caller.key, body: chat() });
  expectEnvelope(refused, 402);
  expect(refused.body.detail).toMatch(/max_tokens/);
  expect(refused.body.extra).toEqual({ required_micros: expect.any(Number), available_micros: expect.any(Number) });
  expect(refused.body.extra.required_micros).toBeGreaterThan(1000);
  expect(refused.body.extra.available_micros).toBeLessThanOrEqual(1000);
  const fits = await http(a.url, "POST", "/v1/chat/completions", { token: caller.key, body: chat(8) });
  expect(fits.status).toBe(200);
  // The same rule for the other create operations.
  const messages = await http(a.url, "POST", "/v1/messages", {
    token: caller.key,
    body: { model: CHAT_MODEL, max_tokens: 400, messages: [{ role: "user", content: "Once upon a time" }] },
  });
  expectEnvelope(messages, 402);
  const responses = await http(a.url, "POST", "/v1/responses", {
    token: caller.key,
    body: { model: CHAT_MODEL, input: "Once upon a time" },
  });
  expectEnvelope(responses, 402);
  const [count] = await a.db<any>("SELECT count(*)::int AS n FROM activity WHERE team_id = $1", [caller.teamId]);
  expect(count.n).toBe(1);
});

test("when an embedding costs more than the credit left, then 402 before any engine work", async () => {
  const caller = await createTestCaller(a.url);
  await setBalance(caller.teamId, 3);
  const input = "a red ball and a blue ball and a green ball";
  const refused = await http(a.url, "POST", "/v1/embeddings", {
    token: caller.key,
    body: { model: EMBED_MODEL, input },
  });
  expectEnvelope(refused, 402);
  await setBalance(caller.teamId, 100);
  const ok = await http(a.url, "POST", "/v1/embeddings", { token: caller.key, body: { model: EMBED_MODEL, input } });
  expect(ok.status).toBe(200);
  await a.app.metering.drainAll();
  const { balance } = await ledgerAddsUp(caller.teamId);
  expect(balance).toBe(100n - BigInt(ok.body.usage.prompt_tokens));
});

test("when credit is plenty, then requests reserve from the process's lease without a database round trip each", async () => {
  const caller = await createTestCaller(a.url);
  const before = a.app.credit.stats.acquires;
  for (let i = 0; i < 12; i++) {
    expect((await http(a.url, "POST", "/v1/chat/completions", { token: caller.key, body: chat(4) })).status).toBe(200);
  }
  expect(a.app.credit.stats.acquires - before).toBeLessThanOrEqual(2);
});

test("when a process goes idle, then it gives its lease back and the other process can use that credit", async () => {
  const caller = await createTestCaller(a.url);
  await setBalance(caller.teamId, 300);
  expect((await http(a.url, "POST", "/v1/chat/completions", { token: caller.key, body: chat(8) })).status).toBe(200);
  const leased = await a.db<any>("SELECT micros FROM credit_leases WHERE team_id = $1 AND holder = $2", [
    caller.teamId,
    a.app.credit.holder,
  ]);
  expect(leased).toHaveLength(1);
  // a holds a lease; once idle it is deleted.
  expect(
    await eventually(
      async () => (await a.db("SELECT 1 FROM credit_leases WHERE team_id = $1", [caller.teamId])).length === 0,
      15_000,
    ),
  ).toBe(true);
  // Now b may lease nearly everything that is left: a request whose worst case needs most of it.
  const { balance } = await ledgerAddsUp(caller.teamId);
  const maxTokens = Number((balance - 6n) / 10n);
  const big = await http(b.url, "POST", "/v1/chat/completions", { token: caller.key, body: chat(maxTokens) });
  expect(big.status).toBe(200);
}, 30_000);

test("when a request too big for the credit is refused on one process, then it takes no credit from the other", async () => {
  const caller = await createTestCaller(a.url);
  await setBalance(caller.teamId, 3000);
  for (let i = 0; i < 3; i++) {
    expectEnvelope(await http(b.url, "POST", "/v1/chat/completions", { token: caller.key, body: chat(490) }), 402);
  }
  const [lease] = await a.db<any>(
    "SELECT coalesce(sum(micros), 0) AS micros FROM credit_leases WHERE team_id = $1 AND holder = $2",
    [caller.teamId, b.app.credit.holder],
  );
  expect(BigInt(lease.micros)).toBe(0n);
  expect((await http(a.url, "POST", "/v1/chat/completions", { token: caller.key, body: chat(8) })).status).toBe(200);
});

test("when another process holds an idle lease, then a request that needs that credit gets it without waiting for the idle release", async () => {
  const caller = await createTestCaller(a.url);
  await setBalance(caller.teamId, 3000);
  expect((await http(a.url, "POST", "/v1/chat/completions", { token: caller.key, body: chat(8) })).status).toBe(200);
  const [held] = await a.db<any>("SELECT micros FROM credit_leases WHERE team_id = $1 AND holder = $2", [
    caller.teamId,
    a.app.credit.holder,
  ]);
  expect(BigInt(held.micros)).toBeGreaterThan(1000n); // a holds about half of the credit
  const releasesBefore = a.app.credit.stats.releases;
  // Worst case 6 + 200 × 10 = 2006 µUSD: more than what a left free.
  const big = await http(b.url, "POST", "/v1/chat/completions", { token: caller.key, body: chat(200) });
  expect(big.status).toBe(200);
  expect(a.app.credit.stats.releases).toBeGreaterThan(releasesBefore);
});

test("when a request fails in the engine or its client leaves, then its reserved credit comes back", async () => {
  const { failNextGeneration } = await import("./support/engine-faults.js");
  const caller = await createTestCaller(a.url);
  await setBalance(caller.teamId, 90); // one worst case of chat(8): 86 µUSD
  await failNextGeneration();
  const failed = await http(a.url, "POST", "/v1/chat/completions", { token: caller.key, body: chat(8) });
  expect(failed.status).toBe(502);
  // A client that leaves before the answer.
  const controller = new AbortController();
  const leaving = fetch(`${a.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${caller.key}`, "content-type": "application/json" },
    body: JSON.stringify({ ...chat(8), stream: true }),
    signal: controller.signal,
  }).then((r) => r.body?.getReader().read());
  controller.abort();
  await leaving.catch(() => undefined);
  await a.app.metering.drainAll();
  const { balance } = await ledgerAddsUp(caller.teamId);
  // Whatever the aborted stream was charged, the rest of its reservation is free again.
  const after = await http(a.url, "POST", "/v1/chat/completions", {
    token: caller.key,
    body: chat(Number((balance - 6n) / 10n)),
  });
  expect(after.status).toBe(200);
});
