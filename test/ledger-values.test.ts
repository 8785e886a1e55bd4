/**
 * The money rules checked on the values themselves, not only through the database constraints
 * that back them (issue 14, item 3; DESIGN §3 Money): a charge never takes a balance below zero
 * (a charge that would cross it is capped, and `balance_after_micros` is the previous balance
 * minus the charge), the ledger adds up to the team's balance, a request id is charged once, and
 * a request that reused a cached prompt prefix costs
 * `uncached × input + cached × cached_input + completion × output`, rounded half up once.
 *
 * Prices come from a test catalog (the shipped ones are too small to show arithmetic). The last
 * group runs on a database whose floor and uniqueness constraints were dropped, so it is the
 * flush's own arithmetic that must keep the rules.
 */
import { v7 as uuidv7 } from "uuid";
import type { Principal } from "../src/services/platform/context.js";
import type { UsageRecord } from "../src/services/metering/metering.service.js";
import {
  CHAT_MODEL,
  type TestServer,
  createTestCaller,
  expectEnvelope,
  http,
  startTestServer,
} from "./support/harness.js";
import { writeTestCatalog } from "./support/test-catalog.js";
import { principalOf, usageRecordFor } from "./support/records.js";

/** USD per million tokens = micro-USD per token; fractional so that rounding matters. */
const PRICES = { input: "2.5", cachedInput: "0.75", output: "7.25" };
/** The same prices in micro-USD per million tokens. */
const PER_MILLION = { input: 2_500_000n, cachedInput: 750_000n, output: 7_250_000n };
/** Credit of each new team here: a few requests' worth. */
const GRANT = 2_000n;

/** DESIGN §3 Money, computed independently of `src/shared/money.ts`. */
function expectedCost(promptTokens: number, cachedTokens: number, completionTokens: number): bigint {
  const scaled =
    BigInt(promptTokens - cachedTokens) * PER_MILLION.input +
    BigInt(cachedTokens) * PER_MILLION.cachedInput +
    BigInt(completionTokens) * PER_MILLION.output;
  return (scaled + 500_000n) / 1_000_000n;
}

interface LedgerRow {
  type: string;
  amount_micros: string;
  balance_after_micros: string;
  source_id: string;
}

/**
 * The team's ledger as one history: a grant, then charges that only lower the balance. Rows of one
 * flush share a statement, so they are ordered by the balance they left; among rows that left the
 * same balance, the one that reached it (the only one with a non-zero amount) comes first.
 */
async function ledgerOf(server: TestServer, teamId: string): Promise<LedgerRow[]> {
  return server.db<LedgerRow>(
    `SELECT type, amount_micros, balance_after_micros, source_id FROM credit_ledger WHERE team_id = $1
      ORDER BY balance_after_micros DESC, amount_micros, created_at, id`,
    [teamId],
  );
}

async function balanceOf(server: TestServer, teamId: string): Promise<bigint> {
  const [team] = await server.db<{ b: string }>("SELECT credit_balance_micros AS b FROM teams WHERE id = $1", [teamId]);
  return BigInt(team.b);
}

/** Every row leaves the previous balance plus its amount, never below zero; the last is the team's balance. */
async function expectLedgerAddsUp(server: TestServer, teamId: string): Promise<LedgerRow[]> {
  const ledger = await ledgerOf(server, teamId);
  let balance = 0n;
  for (const row of ledger) {
    balance += BigInt(row.amount_micros);
    expect(BigInt(row.balance_after_micros)).toBe(balance);
    expect(balance).toBeGreaterThanOrEqual(0n);
  }
  expect(await balanceOf(server, teamId)).toBe(balance);
  return ledger;
}

describe("through the API, with catalog prices", () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer({
      catalogPath: writeTestCatalog(CHAT_MODEL, PRICES),
      signupCreditMicros: GRANT,
    });
  });
  afterAll(() => server.close());

  test("when a team with a small balance spends it all, then each charge is what the request cost, capped at the balance, and the ledger adds up to 0 then 402", async () => {
    const caller = await createTestCaller(server.url);
    const answers: any[] = [];
    let refused: Awaited<ReturnType<typeof http>> | undefined;
    for (let i = 0; i < 40 && !refused; i++) {
      const res = await http(server.url, "POST", "/v1/chat/completions", {
        token: caller.key,
        body: { model: CHAT_MODEL, messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 100 },
      });
      if (res.status === 200) answers.push(res.body);
      else refused = res;
    }
    expect(answers.length).toBeGreaterThan(1);
    expectEnvelope(refused!, 402);

    const ledger = await expectLedgerAddsUp(server, caller.teamId);
    expect(ledger[0]).toMatchObject({ type: "grant", amount_micros: GRANT.toString() });
    const usage = ledger.slice(1);
    expect(usage.every((row) => row.type === "usage")).toBe(true);
    // One usage row per answered request, in the order they were answered; none for the 402.
    const ids = answers.map((a) => (a.id as string).replace("chatcmpl-", ""));
    expect(usage.map((row) => row.source_id)).toEqual(ids);
    const activity = await server.db<any>("SELECT * FROM activity WHERE team_id = $1", [caller.teamId]);
    expect(activity.map((a) => a.id).sort()).toEqual([...ids].sort());

    let before = GRANT;
    for (const [i, answer] of answers.entries()) {
      const row = activity.find((a) => a.id === ids[i]);
      const u = answer.usage;
      expect(row).toMatchObject({
        prompt_tokens: u.prompt_tokens,
        cached_prompt_tokens: u.prompt_tokens_details.cached_tokens,
        completion_tokens: u.completion_tokens,
      });
      const cost = expectedCost(u.prompt_tokens, u.prompt_tokens_details.cached_tokens, u.completion_tokens);
      expect(cost).toBeGreaterThan(0n);
      const charged = -BigInt(usage[i].amount_micros);
      const after = BigInt(usage[i].balance_after_micros);
      expect(charged).toBe(cost < before ? cost : before);
      expect(after).toBe(before - charged);
      expect(after).toBeGreaterThanOrEqual(0n);
      // An uncapped charge is the activity's cost; a capped one is the whole remaining balance.
      if (charged === cost) expect(BigInt(row.cost_micros)).toBe(charged);
      else expect(after).toBe(0n);
      before = after;
    }
    expect(await balanceOf(server, caller.teamId)).toBe(before);
  });

  test("when a second request shares the first one's prompt prefix, then it reports cached tokens and costs them at the cached price", async () => {
    const caller = await createTestCaller(server.url);
    const story = "Once upon a time, there was a little girl named Lily. She liked to play in the park. ";
    const ask = (content: string) =>
      http(server.url, "POST", "/v1/chat/completions", {
        token: caller.key,
        body: { model: CHAT_MODEL, messages: [{ role: "user", content }], max_tokens: 6, temperature: 0 },
      });
    const first = await ask(story.repeat(3));
    expect(first.status).toBe(200);
    const second = await ask(`${story.repeat(3)}One day, Lily saw a big red ball.`);
    expect(second.status).toBe(200);

    const u = second.body.usage;
    const cached = u.prompt_tokens_details.cached_tokens as number;
    expect(cached).toBeGreaterThan(first.body.usage.prompt_tokens / 2);
    expect(cached).toBeLessThan(u.prompt_tokens);

    for (const answer of [first.body, second.body]) {
      const id = (answer.id as string).replace("chatcmpl-", "");
      const [row] = await server.db<any>("SELECT * FROM activity WHERE id = $1", [id]);
      const cost = expectedCost(
        answer.usage.prompt_tokens,
        answer.usage.prompt_tokens_details.cached_tokens,
        answer.usage.completion_tokens,
      );
      expect(row.cached_prompt_tokens).toBe(answer.usage.prompt_tokens_details.cached_tokens);
      expect(BigInt(row.cost_micros)).toBe(cost);
      const [charge] = await server.db<LedgerRow>(
        "SELECT * FROM credit_ledger WHERE type = 'usage' AND source_id = $1",
        [id],
      );
      expect(-BigInt(charge.amount_micros)).toBe(cost);
    }
    // The cached price made a difference that the arithmetic above had to get right.
    const secondCost = expectedCost(u.prompt_tokens, cached, u.completion_tokens);
    expect(expectedCost(u.prompt_tokens, 0, u.completion_tokens) - secondCost).toBeGreaterThan(100n);
    await expectLedgerAddsUp(server, caller.teamId);
  });
});

describe("the flush's own arithmetic, with the floor and one-charge constraints dropped", () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer({ engineSequences: 1, signupCreditMicros: GRANT });
    // This file's own database: the CHECK (… >= 0) floors and the ledger's unique source go.
    const checks = await server.db<{ table: string; name: string }>(
      `SELECT conrelid::regclass::text AS table, conname AS name FROM pg_constraint
        WHERE conrelid IN ('teams'::regclass, 'credit_ledger'::regclass)
          AND ((contype = 'c' AND pg_get_constraintdef(oid) LIKE '%>= 0%') OR conname = 'credit_ledger_source_key')`,
    );
    expect(checks.map((c) => c.name).sort()).toEqual([
      "credit_ledger_balance_after_micros_check",
      "credit_ledger_source_key",
      "teams_credit_balance_micros_check",
    ]);
    for (const c of checks) await server.db(`ALTER TABLE ${c.table} DROP CONSTRAINT ${c.name}`);
  });
  afterAll(() => server.close());

  const principalFor = async (): Promise<Principal> => principalOf(await createTestCaller(server.url));
  const record = (principal: Principal, costMicros: bigint, id = uuidv7()): UsageRecord =>
    usageRecordFor(principal, { id, costMicros });

  test("when charges in one flush exceed the balance, then each is capped at what is left and no balance goes below zero", async () => {
    const principal = await principalFor();
    // 5 × 700 against 2,000: 700, 700, 600 (capped), 0, 0, in request-id order.
    const records = Array.from({ length: 5 }, () => record(principal, 700n));
    const charges = await Promise.all(records.map((r) => server.app.metering.record(r)));
    expect(charges.map((c) => c.chargedMicros)).toEqual([700n, 700n, 600n, 0n, 0n]);
    expect(charges.map((c) => c.balanceAfterMicros)).toEqual([1_300n, 600n, 0n, 0n, 0n]);
    const late = record(principal, 50n);
    expect(await server.app.metering.record(late)).toEqual({ chargedMicros: 0n, balanceAfterMicros: 0n });

    const ledger = await expectLedgerAddsUp(server, principal.teamId);
    expect(ledger[0]).toMatchObject({ type: "grant", amount_micros: GRANT.toString() });
    expect(
      ledger
        .slice(1)
        .map((row) => row.source_id)
        .sort(),
    ).toEqual([...records, late].map((r) => r.id).sort());
    expect(await balanceOf(server, principal.teamId)).toBe(0n);
    const charged = ledger
      .filter((row) => row.type === "usage")
      .reduce((sum, row) => sum - BigInt(row.amount_micros), 0n);
    expect(charged).toBe(GRANT);
  });

  test("when a request id is recorded again in a later flush, then it is stored and charged once", async () => {
    const principal = await principalFor();
    const id = uuidv7();
    const first = await server.app.metering.record(record(principal, 300n, id));
    const again = await server.app.metering.record(record(principal, 300n, id));
    expect(first).toEqual({ chargedMicros: 300n, balanceAfterMicros: GRANT - 300n });
    expect(again.chargedMicros).toBe(0n);
    const rows = await server.db<LedgerRow>("SELECT * FROM credit_ledger WHERE source_id = $1", [id]);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ type: "usage", amount_micros: "-300" });
    const [{ n }] = await server.db<{ n: number }>("SELECT count(*)::int AS n FROM activity WHERE id = $1", [id]);
    expect(n).toBe(1);
    await expectLedgerAddsUp(server, principal.teamId);
    expect(await balanceOf(server, principal.teamId)).toBe(GRANT - 300n);
  });
});
