/**
 * The ledger under concurrency (issue 10, Checks; DESIGN §3 Money): 200 chat requests sent at
 * once through two API processes on one database, against a balance that covers about 100 of
 * them. The balance ends ≥ 0, every charged request has exactly one `usage` transaction (and
 * every refused one none), and the sum of the team's transactions equals its final balance.
 * Prices: 1 µUSD per prompt token, 10 per completion token (test/support/test-catalog.ts).
 */
import {
  CHAT_MODEL,
  type TestServer,
  createTestCaller,
  expectEnvelope,
  http,
  startTestServer,
} from "./support/harness.js";
import type { DataSource } from "typeorm";
import { writeTestCatalog } from "./support/test-catalog.js";

let a: TestServer;
let b: TestServer;

beforeAll(async () => {
  const catalogPath = writeTestCatalog(CHAT_MODEL, { input: "1", cachedInput: "0.5", output: "10" });
  a = await startTestServer({ catalogPath, engineSequences: 4 });
  b = await startTestServer({ catalogPath, engineSequences: 4 }, a);
}, 60_000);
afterAll(async () => {
  await b.close();
  await a.close();
});

/** Sets the team's balance to `micros` with an adjustment on the ledger, so both keep adding up. */
async function setBalance(teamId: string, micros: number): Promise<void> {
  await a.db(
    `WITH t AS (UPDATE teams SET credit_balance_micros = $2::bigint WHERE id = $1
                RETURNING id, $2::bigint - (SELECT credit_balance_micros FROM teams WHERE id = $1) AS delta)
     INSERT INTO credit_ledger (id, team_id, type, amount_micros, balance_after_micros, source_id)
     SELECT gen_random_uuid(), id, 'adjustment', delta, $2::bigint, gen_random_uuid()::text FROM t`,
    [teamId, micros],
  );
}

/**
 * Sends 200 chats at once, half through each server, against a balance that covers about 100
 * worst cases, and checks the ledger: every 200 charged once and in full, the rest 402 with no
 * record, transactions summing to the balance, never below zero.
 */
async function raceAndCheck(): Promise<void> {
  const caller = await createTestCaller(a.url);
  // Worst case per request: 6 prompt tokens × 1 + 8 completion tokens × 10 = 86 µUSD.
  const balance = 100 * 86;
  await setBalance(caller.teamId, balance);
  const answers = await Promise.all(
    Array.from({ length: 200 }, (_, i) =>
      http(i % 2 === 0 ? a.url : b.url, "POST", "/v1/chat/completions", {
        token: caller.key,
        body: {
          model: CHAT_MODEL,
          messages: [{ role: "user", content: "Once upon a time" }],
          max_tokens: 8,
          temperature: 0,
          metadata: { custom_id: `race-${i}` },
        },
      }),
    ),
  );
  const ok = answers.filter((r) => r.status === 200);
  for (const r of answers.filter((x) => x.status !== 200)) expectEnvelope(r, 402);
  // About 100: every worst case covered is served, and no more than the balance allows.
  expect(ok.length).toBeGreaterThanOrEqual(90);
  expect(ok.length).toBeLessThan(200);
  await a.app.metering.drainAll();
  await b.app.metering.drainAll();

  const rows = await a.db<any>(
    `SELECT a.custom_id, a.status, a.cost_micros::text AS cost,
            (SELECT count(*)::int FROM credit_ledger l WHERE l.type = 'usage' AND l.source_id = a.id::text) AS charges,
            (SELECT sum(l.amount_micros)::text FROM credit_ledger l
              WHERE l.type = 'usage' AND l.source_id = a.id::text) AS charged
       FROM activity a WHERE a.team_id = $1`,
    [caller.teamId],
  );
  expect(rows).toHaveLength(ok.length); // refusals (402) leave no record and no charge
  let total = 0n;
  for (const row of rows) {
    expect(row.status).toBe("completed");
    expect(BigInt(row.cost)).toBeGreaterThan(0n);
    expect(row.charges).toBe(1);
    expect(BigInt(row.charged)).toBe(-BigInt(row.cost)); // charged in full, never capped
    total += BigInt(row.cost);
  }
  // No usage transaction without its request.
  const [usage] = await a.db<any>(
    "SELECT count(*)::int AS n, coalesce(sum(amount_micros), 0)::text AS sum FROM credit_ledger WHERE team_id = $1 AND type = 'usage'",
    [caller.teamId],
  );
  expect(usage.n).toBe(ok.length);
  expect(BigInt(usage.sum)).toBe(-total);

  const [end] = await a.db<any>(
    `SELECT (SELECT credit_balance_micros::text FROM teams WHERE id = $1) AS balance,
            (SELECT sum(amount_micros)::text FROM credit_ledger WHERE team_id = $1) AS ledger,
            (SELECT min(balance_after_micros)::text FROM credit_ledger WHERE team_id = $1) AS lowest`,
    [caller.teamId],
  );
  expect(BigInt(end.balance)).toBeGreaterThanOrEqual(0n);
  expect(BigInt(end.lowest)).toBeGreaterThanOrEqual(0n);
  expect(BigInt(end.ledger)).toBe(BigInt(end.balance));
  expect(BigInt(end.balance)).toBe(BigInt(balance) - total);

  // The transactions list, walked with its cursor, is the ledger in the order it was applied:
  // each entry's balance_after is the older one's plus its amount, the newest's is the balance.
  const items: Array<{ amount_micros: number; balance_after_micros: number }> = [];
  let after: string | null = null;
  do {
    const page: any = await http(
      a.url,
      "GET",
      `/control/v1/billing/transactions?limit=100${after ? `&starting_after=${after}` : ""}`,
      { token: caller.token },
    );
    expect(page.status).toBe(200);
    items.push(...page.body.items);
    after = page.body.next_starting_after;
  } while (after);
  expect(items).toHaveLength(usage.n + 2); // the signup grant and the balance set above
  expect(BigInt(items[0].balance_after_micros)).toBe(BigInt(end.balance));
  for (let i = 0; i + 1 < items.length; i++) {
    expect(items[i].balance_after_micros).toBe(items[i + 1].balance_after_micros + items[i].amount_micros);
  }
}

test("when 200 chat requests race for a balance that covers about 100, then the balance ends ≥ 0, each charged request has exactly one usage transaction and the transactions sum to the balance", async () => {
  await raceAndCheck();
}, 180_000);

/**
 * Delays every lease transaction's answer by `ms` in one server's `CreditService` (a slow
 * network or a busy event loop): the order in which Node handles the acquire's answer and a
 * flush's answer is then the reverse of their commit order.
 */
function delayLeaseAnswers(server: TestServer, ms: number): () => void {
  const credit = server.app.credit as unknown as { ds: DataSource };
  const ds = credit.ds;
  credit.ds = new Proxy(ds, {
    get(target, prop, receiver) {
      if (prop !== "transaction") return Reflect.get(target, prop, receiver);
      return async (...args: Parameters<DataSource["transaction"]>) => {
        const answer = await (target.transaction as (...a: unknown[]) => Promise<unknown>)(...args);
        await new Promise((r) => setTimeout(r, ms));
        return answer;
      };
    },
  });
  return () => (credit.ds = ds);
}

test("when a charge settles while the answer of a lease acquire is on its way, then the lease still counts it and no charge is capped at the balance", async () => {
  // The CI failure of session 7: an acquire read the lease, a flush charged it afterwards and
  // settled first, and assigning the acquire's figure let the process promise credit already
  // spent, so the other process's charge was capped.
  const restore = [delayLeaseAnswers(a, 30), delayLeaseAnswers(b, 30)];
  try {
    await raceAndCheck();
  } finally {
    for (const r of restore) r();
  }
}, 180_000);
