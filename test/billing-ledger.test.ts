/**
 * Credit-side ledger entries (issue 10, item 4; `src/services/ledger/ledger.ts`): concurrent
 * entries of one team serialise on the team row, each source applies once, a negative entry never
 * takes the balance below zero nor below the credit leased to requests in flight (409 instead),
 * and the balance is the sum of the ledger.
 */
import { appendLedgerCredit } from "../src/services/ledger/ledger.js";
import type { AppError } from "../src/shared/errors.js";
import { type TestServer, createTestUser, startTestServer } from "./support/harness.js";

let server: TestServer;

beforeAll(async () => {
  server = await startTestServer({ signupCreditMicros: 5_000_000 });
}, 30_000);
afterAll(() => server.close());

const append = (teamId: string, type: "adjustment" | "refund" | "top_up", amountMicros: bigint, sourceId: string) =>
  server.app.dataSource.transaction((em) =>
    appendLedgerCredit(em, { teamId, type, amountMicros, sourceId, description: "test" }),
  );

test("when negative entries race for one balance, then it never goes below zero and the ledger sums to it", async () => {
  const owner = await createTestUser(server.url);
  const results = await Promise.allSettled(
    Array.from({ length: 12 }, (_, i) => append(owner.teamId, "adjustment", -1_000_000n, `adj-${owner.teamId}-${i}`)),
  );
  const applied = results.filter((r) => r.status === "fulfilled");
  const refused = results.filter((r) => r.status === "rejected");
  expect(applied).toHaveLength(5);
  for (const r of refused) expect(((r as PromiseRejectedResult).reason as AppError).status).toBe(409);
  const rows = await server.db<{ amount_micros: string; balance_after_micros: string }>(
    "SELECT amount_micros::text, balance_after_micros::text FROM credit_ledger WHERE team_id = $1 ORDER BY created_at, id",
    [owner.teamId],
  );
  // Each entry's balance_after is the previous one's plus its amount, in commit order.
  let running = 0n;
  for (const r of rows) {
    running += BigInt(r.amount_micros);
    expect(BigInt(r.balance_after_micros)).toBe(running);
    expect(running >= 0n).toBe(true);
  }
  const [team] = await server.db<{ b: string }>("SELECT credit_balance_micros::text AS b FROM teams WHERE id = $1", [
    owner.teamId,
  ]);
  expect(BigInt(team.b)).toBe(running);
  expect(running).toBe(0n);
});

test("when one source is appended twice at once, then it applies once", async () => {
  const owner = await createTestUser(server.url);
  const [a, b] = await Promise.all([
    append(owner.teamId, "refund", 2_000_000n, `refund-${owner.teamId}`),
    append(owner.teamId, "refund", 2_000_000n, `refund-${owner.teamId}`),
  ]);
  expect([a.applied, b.applied].sort()).toEqual([false, true]);
  expect(a.entryId).toBe(b.entryId);
  expect(a.balanceAfterMicros).toBe(7_000_000n);
  const [team] = await server.db<{ b: string }>("SELECT credit_balance_micros::text AS b FROM teams WHERE id = $1", [
    owner.teamId,
  ]);
  expect(team.b).toBe("7000000");
});

test("when credit is reserved for a request in flight, then a debit may take the balance down to the reservation's lease and no further", async () => {
  // Issue 28, item 6: the rule's own test. The reservation is the one a request takes before it
  // runs (`CreditService.reserve`), so the team's lease row is the real one, headroom included.
  const owner = await createTestUser(server.url);
  const reservation = await server.app.credit.reserve(owner.teamId, 1_000_000n);
  try {
    const [lease] = await server.db<{ micros: string }>(
      "SELECT coalesce(sum(micros), 0)::text AS micros FROM credit_leases WHERE team_id = $1 AND expires_at > now()",
      [owner.teamId],
    );
    const leased = BigInt(lease.micros);
    expect(leased).toBeGreaterThanOrEqual(1_000_000n);
    expect(leased).toBeLessThan(5_000_000n);
    const free = 5_000_000n - leased;

    // One micro-USD past the free credit: refused though the balance covers it, nothing written.
    const over = await append(owner.teamId, "adjustment", -(free + 1n), `floor-over-${owner.teamId}`).then(
      () => undefined,
      (err: AppError) => err,
    );
    expect(over?.status).toBe(409);
    expect(over?.message).toMatch(/promised to requests in flight/);
    const entries = () =>
      server.db<{ type: string; amount_micros: string }>(
        "SELECT type, amount_micros::text FROM credit_ledger WHERE team_id = $1 ORDER BY created_at, id",
        [owner.teamId],
      );
    expect(await entries()).toEqual([{ type: "grant", amount_micros: "5000000" }]);

    // Exactly the free credit: applied, and the balance is left at the lease.
    const done = await append(owner.teamId, "adjustment", -free, `floor-exact-${owner.teamId}`);
    expect(done).toMatchObject({ applied: true, balanceAfterMicros: leased });
    const [team] = await server.db<{ b: string }>("SELECT credit_balance_micros::text AS b FROM teams WHERE id = $1", [
      owner.teamId,
    ]);
    expect(BigInt(team.b)).toBe(leased);
    // Nothing more comes off while the request is in flight.
    await expect(append(owner.teamId, "refund", -1n, `floor-more-${owner.teamId}`)).rejects.toMatchObject({
      status: 409,
    });
  } finally {
    reservation.release();
  }
});
