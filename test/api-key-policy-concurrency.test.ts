/**
 * API key limits across processes (issue 29, Checks): two API processes — this test's server and
 * a Switchyard child process (`node src/main.ts`) — on one database.
 * - 200 chats at once, half through each process, on a key whose budget covers about 50 of them:
 *   the key's spend never passes its budget, every served request is charged in full exactly once
 *   (the budget is reserved before the engine runs, not trimmed afterwards), every refusal is the
 *   key's 402, and the ledger's charges for the key's requests equal the key's spend.
 * - 60 requests at once, half through each process, on a key with `rpm_limit: 20`: 20 (± 1) are
 *   served, the rest refused with the key's 429.
 * Prices: 1 µUSD per prompt token, 10 per completion token (test/support/test-catalog.ts).
 */
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { type ChildServer, cleanUpChildren, launchChild } from "./support/child-server.js";
import {
  CHAT_MODEL,
  type TestServer,
  createTestCaller,
  expectEnvelope,
  http,
  startTestServer,
} from "./support/harness.js";
import { writeTestCatalog } from "./support/test-catalog.js";

let a: TestServer;
let b: ChildServer;
const childDir = mkdtempSync(path.join(os.tmpdir(), "switchyard-keypolicy-"));

beforeAll(async () => {
  const catalogPath = writeTestCatalog(CHAT_MODEL, { input: "1", cachedInput: "0.5", output: "10" });
  a = await startTestServer({ catalogPath, engineSequences: 4 });
  b = await launchChild({
    databaseUrl: a.databaseUrl,
    dataDir: childDir,
    env: { SWITCHYARD_CATALOG: catalogPath, SWITCHYARD_ENGINE_SEQUENCES: "4" },
  });
}, 120_000);
afterAll(async () => {
  await a?.close();
  await cleanUpChildren(childDir);
});

/** Sends `n` requests at once, alternately through each process. */
function race(n: number, key: string, body: (i: number) => unknown) {
  return Promise.all(
    Array.from({ length: n }, (_, i) =>
      http(i % 2 === 0 ? a.url : b.url, "POST", "/v1/chat/completions", { token: key, body: body(i) }),
    ),
  );
}

test("when 200 requests race on two processes for a key whose budget covers about 50, then its spend stays within the budget and equals the ledger's charges", async () => {
  const caller = await createTestCaller(a.url);
  // A worst case is at most 6 prompt tokens × 1 + 8 completion tokens × 10 = 86 µUSD.
  const budget = 50 * 86;
  const set = await http(a.url, "PATCH", `/control/v1/auth/api-keys/${caller.keyId}`, {
    token: caller.token,
    body: { budget_micros: budget, budget_period: "month" },
  });
  expect(set.status).toBe(200);
  const answers = await race(200, caller.key, (i) => ({
    model: CHAT_MODEL,
    messages: [{ role: "user", content: "Once upon a time" }],
    max_tokens: 8,
    temperature: 0,
    metadata: { custom_id: `budget-${i}` },
  }));
  const ok = answers.filter((r) => r.status === 200);
  for (const r of answers.filter((x) => x.status !== 200)) {
    expectEnvelope(r, 402);
    expect(r.body.extra).toMatchObject({ limit: "budget_micros", scope: "api_key", api_key_id: caller.keyId });
  }
  // Every worst case the budget covers is served (the last few may wait on leases held elsewhere).
  expect(ok.length).toBeGreaterThanOrEqual(45);
  expect(ok.length).toBeLessThan(200);
  await a.app.metering.drainAll();

  const rows = await a.db<any>(
    `SELECT a.cost_micros::text AS cost,
            (SELECT count(*)::int FROM credit_ledger l WHERE l.type = 'usage' AND l.source_id = a.id::text) AS charges,
            (SELECT (-sum(l.amount_micros))::text FROM credit_ledger l
              WHERE l.type = 'usage' AND l.source_id = a.id::text) AS charged
       FROM activity a WHERE a.api_key_id = $1`,
    [caller.keyId],
  );
  expect(rows).toHaveLength(ok.length); // refusals leave no record and no charge
  let total = 0n;
  for (const row of rows) {
    expect(row.charges).toBe(1);
    expect(row.charged).toBe(row.cost); // charged in full: reserved before, never capped after
    total += BigInt(row.charged);
  }
  const [spend] = await a.db<any>("SELECT spent_micros::text AS spent FROM api_key_spend WHERE key_id = $1", [
    caller.keyId,
  ]);
  expect(BigInt(spend.spent)).toBe(total);
  expect(total).toBeLessThanOrEqual(BigInt(budget));
  const listed = await http(b.url, "GET", "/control/v1/auth/api-keys", { token: caller.key });
  expect(listed.body.items.find((k: any) => k.id === caller.keyId)).toMatchObject({
    spent_micros: Number(total),
    remaining_micros: budget - Number(total),
  });
}, 240_000);

test("when 60 requests race on two processes for a key with rpm_limit 20, then 20 (± 1) are served and the rest get the key's 429", async () => {
  const caller = await createTestCaller(a.url);
  const set = await http(a.url, "PATCH", `/control/v1/auth/api-keys/${caller.keyId}`, {
    token: caller.token,
    body: { rpm_limit: 20 },
  });
  expect(set.status).toBe(200);
  // The window is the database clock's minute: start early in one, so the race stays inside it.
  const [clock] = await a.db<any>("SELECT extract(second FROM now())::float AS s");
  if (clock.s > 40) await new Promise((r) => setTimeout(r, (61 - clock.s) * 1000));
  const answers = await race(60, caller.key, () => ({
    model: CHAT_MODEL,
    messages: [{ role: "user", content: "Tom" }],
    max_tokens: 2,
  }));
  const ok = answers.filter((r) => r.status === 200).length;
  expect(Math.abs(ok - 20)).toBeLessThanOrEqual(1);
  for (const r of answers.filter((x) => x.status !== 200)) {
    expectEnvelope(r, 429);
    expect(r.body.extra).toMatchObject({ limit: "rpm_limit", value: 20, window: "minute" });
    expect(Number(r.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
  }
  // Both processes served and refused: the count is shared, not per process.
  const servedBy = (url: string) =>
    answers.filter((r, i) => r.status === 200 && (i % 2 === 0 ? a.url : b.url) === url).length;
  expect(servedBy(a.url) + servedBy(b.url)).toBe(ok);
}, 180_000);
