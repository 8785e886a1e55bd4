/**
 * Billing with the local payment provider (issue 10, items 4–6; spec "Billing", "Limits";
 * DESIGN §3 Money and Roles): the transaction list and its cursor, top-ups with nonce
 * idempotency (concurrent same-nonce requests, in one process or racing through two → one
 * session, one credit; another amount → 409), the signed confirm link (opened twice → credited
 * once; forged or altered → 400), invoices of a period's usage by model with cents rounded half
 * up once, bad input (400, nothing stored), 401, members 403, and another team's ids.
 */
import { randomUUID } from "node:crypto";
import type { ConfigInput } from "../src/config/config.js";
import { isoDateTime } from "../src/services/platform/validation.js";
import {
  INVOICE_SETTLE_MS,
  allotCents,
  invoicePeriod,
  previousMonthUtc,
} from "../src/services/billing/invoice-period.js";
import { isLoopbackUrl, warnOfLocalPayments } from "../src/services/billing/payment-provider.js";
import {
  CHAT_MODEL,
  type TestServer,
  type TestUser,
  createTestApiKey,
  createTestUser,
  expectEnvelope,
  expectInvalid,
  http,
  startTestServer,
} from "./support/harness.js";
import { captureLogs } from "./support/log-capture.js";
import { joinTeam } from "./support/teams.js";
import { writeTestCatalog } from "./support/test-catalog.js";

const PUBLIC_URL = "https://switchyard.example.test";
const logs = captureLogs("warn");
let server: TestServer;
/** The server's settings: a second process on the same database starts with the same. */
let SERVER_OPTIONS: Partial<ConfigInput>;

beforeAll(async () => {
  // No signup credit: a new team has nothing until it tops up (and its ledger starts empty).
  // Prices of 1 micro-USD per token, so a request leaves a `usage` entry.
  const catalogPath = writeTestCatalog(CHAT_MODEL, { input: "1", cachedInput: "1", output: "1" });
  // Exposed (a public URL): the local provider needs the opt-in, which keeps its start warning.
  SERVER_OPTIONS = {
    signupCreditMicros: 0,
    publicUrl: PUBLIC_URL,
    localPayments: "allow",
    signup: "open",
    catalogPath,
  };
  server = await startTestServer(SERVER_OPTIONS, undefined, { logger: logs.logger });
}, 30_000);
afterAll(() => server.close());

const topUp = (token: string | undefined, nonce: string | null, body: unknown) =>
  http(server.url, "POST", `/control/v1/billing/topups${nonce === null ? "" : `?nonce=${encodeURIComponent(nonce)}`}`, {
    token,
    body,
  });

/** Opens a checkout URL's confirm link on the test server (the URL names the configured public origin). */
function openLink(checkoutUrl: string) {
  const url = new URL(checkoutUrl);
  expect(url.origin).toBe(PUBLIC_URL);
  return http(server.url, "GET", url.pathname + url.search);
}

async function balance(teamId: string): Promise<bigint> {
  const [row] = await server.db<{ b: string }>("SELECT credit_balance_micros::text AS b FROM teams WHERE id = $1", [
    teamId,
  ]);
  return BigInt(row.b);
}

async function topUpAndConfirm(user: TestUser, amount: string): Promise<void> {
  const res = await topUp(user.token, randomUUID(), { amount_usd: amount });
  expect(res.status).toBe(201);
  expect((await openLink(res.body.checkout_url)).status).toBe(200);
}

const count = async (sql: string, params: unknown[]) => Number((await server.db<{ n: string }>(sql, params))[0].n);

describe("POST /control/v1/billing/topups (local provider)", () => {
  test("when the same nonce is sent concurrently, then one session is made and the link credits once", async () => {
    const owner = await createTestUser(server.url);
    const nonce = `n-${randomUUID()}`;
    const answers = await Promise.all(
      Array.from({ length: 6 }, () => topUp(owner.token, nonce, { amount_usd: "25.50" })),
    );
    for (const a of answers) expect(a.status).toBe(201);
    expect(Object.keys(answers[0].body).sort()).toEqual(["checkout_url", "payment_session_id"]);
    expect(new Set(answers.map((a) => a.body.payment_session_id)).size).toBe(1);
    expect(new Set(answers.map((a) => a.body.checkout_url)).size).toBe(1);
    expect(await count("SELECT count(*) AS n FROM topup_sessions WHERE team_id = $1", [owner.teamId])).toBe(1);
    // Built from the configured public URL, never from the request's Host.
    expect(answers[0].body.checkout_url.startsWith(`${PUBLIC_URL}/control/v1/billing/topups/local/confirm?`)).toBe(
      true,
    );

    // Nothing is credited before the link is opened.
    expect(await balance(owner.teamId)).toBe(0n);
    const opened = await Promise.all([openLink(answers[0].body.checkout_url), openLink(answers[0].body.checkout_url)]);
    const again = await openLink(answers[0].body.checkout_url);
    for (const o of [...opened, again]) {
      expect(o.status).toBe(200);
      expect(o.body).toEqual(opened[0].body);
    }
    expect(opened[0].body).toMatchObject({
      payment_session_id: answers[0].body.payment_session_id,
      status: "completed",
      amount_micros: 25_500_000,
    });
    expect(await balance(owner.teamId)).toBe(25_500_000n);
    const entries = await server.db<{ type: string; amount_micros: string; external_provider: string }>(
      "SELECT type, amount_micros::text, external_provider FROM credit_ledger WHERE team_id = $1",
      [owner.teamId],
    );
    expect(entries).toEqual([{ type: "top_up", amount_micros: "25500000", external_provider: "local" }]);

    // The same nonce and amount later: the same session, no second credit.
    const later = await topUp(owner.token, nonce, { amount_usd: "25.5" });
    expect(later.status).toBe(201);
    expect(later.body).toEqual(answers[0].body);
    expect(await balance(owner.teamId)).toBe(25_500_000n);
  });

  test("when the same nonce races through two processes on one database, then one session is made, every answer names it, and the link credits once", async () => {
    // Issue 28, item 6: inside one process same-nonce requests join one call before they reach
    // the database, so only two processes race the INSERT … ON CONFLICT (a broken one gave two
    // sessions, one of them naming a row that does not exist).
    const second = await startTestServer(SERVER_OPTIONS, server);
    try {
      const owner = await createTestUser(server.url);
      for (let round = 0; round < 10; round++) {
        const nonce = `race-${round}-${randomUUID()}`;
        const answers = await Promise.all(
          Array.from({ length: 6 }, (_, i) =>
            http(i % 2 === 0 ? server.url : second.url, "POST", `/control/v1/billing/topups?nonce=${nonce}`, {
              token: owner.token,
              body: { amount_usd: "2.00" },
            }),
          ),
        );
        expect(answers.map((a) => a.status)).toEqual(Array(6).fill(201));
        const rows = await server.db<{ id: string; external_session_id: string }>(
          "SELECT id, external_session_id FROM topup_sessions WHERE team_id = $1 AND nonce = $2",
          [owner.teamId, nonce],
        );
        expect(rows).toHaveLength(1);
        expect(new Set(answers.map((a) => a.body.payment_session_id))).toEqual(new Set([rows[0].external_session_id]));
        expect(new Set(answers.map((a) => a.body.checkout_url)).size).toBe(1);
      }
      // Each session's link credits its amount once, whichever process opens it.
      const sessions = await server.db<{ checkout_url: string }>(
        "SELECT checkout_url FROM topup_sessions WHERE team_id = $1",
        [owner.teamId],
      );
      for (const [i, s] of sessions.entries()) {
        const url = new URL(s.checkout_url);
        const opened = await http(i % 2 === 0 ? server.url : second.url, "GET", url.pathname + url.search);
        expect(opened.status).toBe(200);
      }
      expect(await balance(owner.teamId)).toBe(20_000_000n);
    } finally {
      await second.close();
    }
  }, 60_000);

  test("when the nonce was used with another amount, then 409 and nothing changes", async () => {
    const owner = await createTestUser(server.url);
    const nonce = randomUUID();
    expect((await topUp(owner.token, nonce, { amount_usd: "10.00" })).status).toBe(201);
    expectEnvelope(await topUp(owner.token, nonce, { amount_usd: "10.01" }), 409);
    // Nonces are per team: another team may use the same one.
    const other = await createTestUser(server.url);
    expect((await topUp(other.token, nonce, { amount_usd: "10.01" })).status).toBe(201);
    expect(await count("SELECT count(*) AS n FROM topup_sessions WHERE nonce = $1", [nonce])).toBe(2);
  });

  test("when a team without credit tops up, then its requests are served again at once", async () => {
    const owner = await createTestUser(server.url);
    const key = await createTestApiKey(server.url, owner.token);
    const chat = () =>
      http(server.url, "POST", "/v1/chat/completions", {
        token: key.key,
        body: { model: CHAT_MODEL, messages: [{ role: "user", content: "Tom" }], max_tokens: 2 },
      });
    expectEnvelope(await chat(), 402);
    await topUpAndConfirm(owner, "1.00");
    const after = await chat();
    expect([after.status, after.text]).toEqual([200, expect.any(String)]);
  });

  test("when the confirm link is forged or altered, then 400 and nothing is credited", async () => {
    const owner = await createTestUser(server.url);
    const a = await topUp(owner.token, randomUUID(), { amount_usd: "5.00" });
    const b = await topUp(owner.token, randomUUID(), { amount_usd: "500.00" });
    const linkA = new URL(a.body.checkout_url);
    const linkB = new URL(b.body.checkout_url);
    const tampered: string[] = [];
    // B's session with A's signature (a cheap link turned into an expensive one).
    tampered.push(`?session=${linkB.searchParams.get("session")}&signature=${linkA.searchParams.get("signature")}`);
    // A flipped signature character.
    const sig = linkA.searchParams.get("signature")!;
    tampered.push(
      `?session=${linkA.searchParams.get("session")}&signature=${sig[0] === "A" ? "B" : "A"}${sig.slice(1)}`,
    );
    // No signature, a made-up session, no session.
    tampered.push(`?session=${linkA.searchParams.get("session")}`);
    tampered.push(`?session=${randomUUID()}&signature=${sig}`);
    tampered.push(`?signature=${sig}`);
    for (const query of tampered) {
      const res = await http(server.url, "GET", `/control/v1/billing/topups/local/confirm${query}`);
      expectEnvelope(res, 400);
    }
    expect(await balance(owner.teamId)).toBe(0n);
    expect(await count("SELECT count(*) AS n FROM credit_ledger WHERE team_id = $1", [owner.teamId])).toBe(0);
  });

  test("when the input is bad, then 400 naming the field and nothing is stored", async () => {
    const owner = await createTestUser(server.url);
    expectInvalid(await topUp(owner.token, null, { amount_usd: "10.00" }), "nonce");
    expectInvalid(await topUp(owner.token, "", { amount_usd: "10.00" }), "nonce");
    for (const amount of ["0.99", "10000.01", "1.001", "-5.00", "1e3", " 10.00", "abc", "", 10, null, undefined]) {
      expectInvalid(
        await topUp(owner.token, randomUUID(), amount === undefined ? {} : { amount_usd: amount }),
        "amount_usd",
      );
    }
    expectEnvelope(await topUp(owner.token, randomUUID(), "not json"), 400);
    for (const ok of ["1.00", "1", "10000.00", "9999.9"]) {
      expect((await topUp(owner.token, randomUUID(), { amount_usd: ok })).status).toBe(201);
    }
    expect(await count("SELECT count(*) AS n FROM topup_sessions WHERE team_id = $1", [owner.teamId])).toBe(4);
  });

  test("when no credentials come, then 401; a member gets 403", async () => {
    const owner = await createTestUser(server.url);
    const member = await joinTeam(server.url, owner, "member");
    const admin = await joinTeam(server.url, owner, "admin");
    expectEnvelope(await topUp(undefined, randomUUID(), { amount_usd: "10.00" }), 401);
    expectEnvelope(await topUp(member.token, randomUUID(), { amount_usd: "10.00" }), 403);
    expect((await topUp(admin.token, randomUUID(), { amount_usd: "10.00" })).status).toBe(201);
    expect(await count("SELECT count(*) AS n FROM topup_sessions WHERE team_id = $1", [owner.teamId])).toBe(1);
  });
});

describe("GET /control/v1/billing/transactions", () => {
  const list = (token: string | undefined, query = "") =>
    http(server.url, "GET", `/control/v1/billing/transactions${query}`, { token });

  test("when a team has ledger entries, then they page newest first by cursor", async () => {
    const owner = await createTestUser(server.url);
    await topUpAndConfirm(owner, "2.00");
    await topUpAndConfirm(owner, "3.00");
    const key = await createTestApiKey(server.url, owner.token);
    const chat = await http(server.url, "POST", "/v1/chat/completions", {
      token: key.key,
      body: { model: CHAT_MODEL, messages: [{ role: "user", content: "Tom" }], max_tokens: 2 },
    });
    expect(chat.status).toBe(200);
    await server.app.metering.drainAll();

    const all = await list(owner.token);
    expect(all.status).toBe(200);
    expect(all.body.next_starting_after).toBeNull();
    const items = all.body.items as Array<Record<string, unknown>>;
    expect(items.map((i) => i.type)).toEqual(["usage", "top_up", "top_up"]);
    expect(Object.keys(items[0]).sort()).toEqual(
      [
        "amount_micros",
        "balance_after_micros",
        "created_at",
        "description",
        "external_payment_id",
        "external_provider",
        "id",
        "type",
      ].sort(),
    );
    expect(items[2]).toMatchObject({
      amount_micros: 2_000_000,
      balance_after_micros: 2_000_000,
      external_provider: "local",
    });
    expect(items[1]).toMatchObject({ amount_micros: 3_000_000, balance_after_micros: 5_000_000 });
    expect(items[0].amount_micros as number).toBeLessThanOrEqual(0);
    expect(items[0].balance_after_micros).toBe(5_000_000 + (items[0].amount_micros as number));
    expect(items[0].external_provider).toBeNull();
    // The balance is the sum of the ledger.
    expect(await balance(owner.teamId)).toBe(BigInt(items.reduce((s, i) => s + (i.amount_micros as number), 0)));

    const seen: string[] = [];
    let cursor: string | null = null;
    for (let page = 0; page < 5; page++) {
      const res = await list(owner.token, `?limit=1${cursor ? `&starting_after=${cursor}` : ""}`);
      expect(res.status).toBe(200);
      expect(res.body.items).toHaveLength(1);
      seen.push(res.body.items[0].id);
      cursor = res.body.next_starting_after;
      if (cursor === null) break;
      expect(cursor).toBe(res.body.items[0].id);
    }
    expect(seen).toEqual(items.map((i) => i.id));
    const two = await list(owner.token, "?limit=2");
    expect(two.body.items.map((i: { id: string }) => i.id)).toEqual(seen.slice(0, 2));
    expect(two.body.next_starting_after).toBe(seen[1]);
    const rest = await list(owner.token, `?limit=2&starting_after=${seen[1]}`);
    expect(rest.body).toEqual({ items: [items[2]], next_starting_after: null });
  });

  test("when the query is bad or the cursor is not the team's, then 400 naming the field", async () => {
    const owner = await createTestUser(server.url);
    const other = await createTestUser(server.url);
    await topUpAndConfirm(other, "1.00");
    const [otherEntry] = await server.db<{ id: string }>("SELECT id FROM credit_ledger WHERE team_id = $1", [
      other.teamId,
    ]);
    for (const q of ["?limit=0", "?limit=101", "?limit=abc", "?limit=1.5", "?limit=1&limit=2"]) {
      expectInvalid(await list(owner.token, q), "limit");
    }
    expectInvalid(await list(owner.token, "?starting_after=nope"), "starting_after");
    expectInvalid(await list(owner.token, `?starting_after=${randomUUID()}`), "starting_after");
    // Another team's transaction: the same answer as an unknown id (nothing to probe).
    expectInvalid(await list(owner.token, `?starting_after=${otherEntry.id}`), "starting_after");
    expect((await list(owner.token, "?limit=100")).status).toBe(200);
  });

  test("when no credentials come, then 401; a member gets 403", async () => {
    const owner = await createTestUser(server.url);
    const member = await joinTeam(server.url, owner, "member");
    expectEnvelope(await list(undefined), 401);
    expectEnvelope(await list(member.token), 403);
  });
});

describe("POST /control/v1/billing/invoices (local provider)", () => {
  const invoice = (token: string | undefined, body?: unknown) =>
    http(server.url, "POST", "/control/v1/billing/invoices", { token, body });

  async function activity(teamId: string, model: string, costMicros: number, createdAt: string): Promise<void> {
    await server.db(
      `INSERT INTO activity (id, team_id, type, status, endpoint, model, cost_micros, created_at)
       VALUES ($1, $2, 'standalone', 'completed', '/v1/chat/completions', $3, $4, $5)`,
      [randomUUID(), teamId, model, costMicros, createdAt],
    );
  }

  test("when a period had usage, then its invoice has a line per model and the total rounded half up once", async () => {
    const owner = await createTestUser(server.url);
    await activity(owner.teamId, "model-a", 12_345, "2026-01-01T00:00:00Z");
    await activity(owner.teamId, "model-a", 5_000, "2026-01-31T23:59:59.999Z");
    await activity(owner.teamId, "model-b", 4_999, "2026-01-15T12:00:00+05:00");
    // Outside [start, end): just before and exactly at the end.
    await activity(owner.teamId, "model-a", 999_999, "2025-12-31T23:59:59.999Z");
    await activity(owner.teamId, "model-c", 999_999, "2026-02-01T00:00:00Z");
    const body = { period_start: "2026-01-01", period_end: "2026-02-01T00:00:00Z" };
    const res = await invoice(owner.token, body);
    expect(res.status).toBe(201);
    // 22,344 micro-USD = 2.2344 cents → 2 cents; lines: a 1.7345 → 2, b 0.4999 → 0 (sum 2).
    expect(res.body).toMatchObject({
      amount_cents: 2,
      currency: "usd",
      period_start: "2026-01-01T00:00:00.000Z",
      period_end: "2026-02-01T00:00:00.000Z",
      status: "paid",
      line_items: [
        { model: "model-a", requests: 2, amount_micros: 17_345, amount_cents: 2 },
        { model: "model-b", requests: 1, amount_micros: 4_999, amount_cents: 0 },
      ],
    });
    expect(res.body.payment_invoice_id).toBe(`local_${res.body.id}`);
    expect(res.body.hosted_invoice_url).toBe(`${PUBLIC_URL}/control/v1/billing/invoices/${res.body.id}`);

    // The same period again: the same invoice; the hosted URL reads it back.
    const again = await invoice(owner.token, body);
    expect(again.body).toEqual(res.body);
    const hosted = await http(server.url, "GET", new URL(res.body.hosted_invoice_url).pathname, { token: owner.token });
    expect(hosted.status).toBe(200);
    expect(hosted.body).toEqual(res.body);
    // Another team's invoice: 404.
    const other = await createTestUser(server.url);
    expectEnvelope(
      await http(server.url, "GET", `/control/v1/billing/invoices/${res.body.id}`, { token: other.token }),
      404,
    );
  });

  test("when no period is given, then the previous calendar month (UTC) is invoiced", async () => {
    const owner = await createTestUser(server.url);
    const { start, end } = previousMonthUtc(new Date());
    await activity(owner.teamId, "model-a", 25_000, new Date(end.getTime() - 1).toISOString());
    await activity(owner.teamId, "model-a", 25_000, end.toISOString());
    const res = await invoice(owner.token);
    if (Date.now() < end.getTime() + INVOICE_SETTLE_MS + 60_000) {
      // The first 25 hours of a month: last month's usage may still be arriving.
      expectInvalid(res, "period_end");
      return;
    }
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({
      period_start: start.toISOString(),
      period_end: end.toISOString(),
      amount_cents: 3, // 2.5 cents, half up
    });
    expect((await invoice(owner.token, {})).body.id).toBe(res.body.id);
  });

  test("when the period is bad, then 400 naming the field and nothing is stored", async () => {
    const owner = await createTestUser(server.url);
    const future = new Date(Date.now() + 86_400_000).toISOString();
    expectInvalid(await invoice(owner.token, { period_start: "2026-01-01" }), "period_end");
    expectInvalid(await invoice(owner.token, { period_end: "2026-01-01" }), "period_start");
    expectInvalid(await invoice(owner.token, { period_start: "January", period_end: "2026-01-01" }), "period_start");
    expectInvalid(await invoice(owner.token, { period_start: "2026-02-01", period_end: "2026-01-01" }), "period_end");
    expectInvalid(await invoice(owner.token, { period_start: "2024-01-01", period_end: "2026-01-01" }), "period_end");
    expectInvalid(await invoice(owner.token, { period_start: "2026-01-01", period_end: future }), "period_end");
    expectInvalid(await invoice(owner.token, { period_start: 5, period_end: "2026-01-01" }), "period_start");
    expectInvalid(await invoice(owner.token, { period_start: "2025-02-29", period_end: "2025-03-10" }), "period_start");
    expectInvalid(await invoice(owner.token, { period_start: "0000-01-01", period_end: "2026-01-01" }), "period_start");
    expect(await count("SELECT count(*) AS n FROM invoices WHERE team_id = $1", [owner.teamId])).toBe(0);
    expectInvalid(
      await http(server.url, "GET", "/control/v1/billing/invoices/nope", { token: owner.token }),
      "invoice_id",
    );
  });

  test("when the period ended less than 24 h + 1 h ago, then 400 saying from when it can be invoiced (review finding 3)", async () => {
    const owner = await createTestUser(server.url);
    const hour = 3_600_000;
    const endRecent = new Date(Math.floor((Date.now() - 24 * hour) / hour) * hour);
    const res = await invoice(owner.token, {
      period_start: new Date(endRecent.getTime() - 10 * 86_400_000).toISOString(),
      period_end: endRecent.toISOString(),
    });
    expectInvalid(res, "period_end");
    expect(res.body.detail).toContain(new Date(endRecent.getTime() + INVOICE_SETTLE_MS).toISOString());
    expect(res.body.detail).toMatch(/24 h/);
    // Ended 26 h ago (whole hours): settled.
    const settled = new Date(Math.floor((Date.now() - 26 * hour) / hour) * hour);
    const ok = await invoice(owner.token, {
      period_start: new Date(settled.getTime() - 86_400_000).toISOString(),
      period_end: settled.toISOString(),
    });
    expect(ok.status).toBe(201);
    // The rule itself, at its edge.
    const now = new Date("2026-03-10T12:00:00Z");
    const edge = new Date(now.getTime() - INVOICE_SETTLE_MS);
    expect(invoicePeriod({ period_start: new Date("2026-03-01"), period_end: edge }, now).end).toEqual(edge);
    expect(() =>
      invoicePeriod({ period_start: new Date("2026-03-01"), period_end: new Date(edge.getTime() + 1) }, now),
    ).toThrow(/25 hours/);
    // The default on the 1st of a month: last month is not invoiceable yet.
    expect(() => invoicePeriod({}, new Date("2026-03-01T20:00:00Z"))).toThrow(/2026-03-02T01:00:00.000Z/);
  });

  test("when a period overlaps an invoice of the team, then 409 naming it and nothing is stored (review finding 4)", async () => {
    const owner = await createTestUser(server.url);
    await activity(owner.teamId, "model-a", 1_000_000, "2026-01-20T00:00:00Z");
    const jan = await invoice(owner.token, { period_start: "2026-01-01", period_end: "2026-02-01" });
    expect(jan.status).toBe(201);
    for (const [ps, pe] of [
      ["2026-01-15", "2026-02-15"], // straddles the end
      ["2025-12-15", "2026-01-02"], // straddles the start
      ["2026-01-10", "2026-01-20"], // inside
      ["2025-12-01", "2026-03-01"], // around
      ["2026-01-01", "2026-01-31"], // same start
    ]) {
      const res = await invoice(owner.token, { period_start: ps, period_end: pe });
      expectEnvelope(res, 409);
      expect(res.body.detail).toContain(jan.body.id);
    }
    // Concurrent overlapping periods: one wins.
    const racing = await Promise.all([
      invoice(owner.token, { period_start: "2026-02-01", period_end: "2026-03-01" }),
      invoice(owner.token, { period_start: "2026-02-15", period_end: "2026-03-15" }),
      invoice(owner.token, { period_start: "2026-02-20", period_end: "2026-03-20" }),
    ]);
    expect(racing.map((r) => r.status).sort()).toEqual([201, 409, 409]);
    // Adjacent periods ([start, end) touch) are fine; another team may invoice any period.
    expect((await invoice(owner.token, { period_start: "2025-12-01", period_end: "2026-01-01" })).status).toBe(201);
    const other = await createTestUser(server.url);
    expect((await invoice(other.token, { period_start: "2026-01-15", period_end: "2026-02-15" })).status).toBe(201);
    expect(await count("SELECT count(*) AS n FROM invoices WHERE team_id = $1", [owner.teamId])).toBe(3);
  });

  test("when no credentials come, then 401; a member gets 403", async () => {
    const owner = await createTestUser(server.url);
    const member = await joinTeam(server.url, owner, "member");
    expectEnvelope(await invoice(undefined), 401);
    expectEnvelope(await invoice(member.token), 403);
  });
});

describe("billing over GraphQL", () => {
  const gql = (token: string, query: string, variables?: Record<string, unknown>) =>
    http(server.url, "POST", "/graphql", { token, body: { query, variables } });

  test("when the same operations run over GraphQL, then they answer as REST does", async () => {
    const owner = await createTestUser(server.url);
    const create = `mutation($n: String!, $a: String!) { createTopUp(nonce: $n, amountUsd: $a) { paymentSessionId checkoutUrl } }`;
    const first = await gql(owner.token, create, { n: "g1", a: "7.00" });
    const second = await gql(owner.token, create, { n: "g1", a: "7.00" });
    expect(first.body.data.createTopUp).toEqual(second.body.data.createTopUp);
    const conflict = await gql(owner.token, create, { n: "g1", a: "8.00" });
    expect(conflict.body.errors[0].extensions.status_code).toBe(409);
    const bad = await gql(owner.token, create, { n: "g2", a: "0.5" });
    expect(bad.body.errors[0].extensions.status_code).toBe(400);
    expect((await openLink(first.body.data.createTopUp.checkoutUrl)).status).toBe(200);

    const page = await gql(
      owner.token,
      `{ billingTransactions(limit: 5) { items { type amountMicros externalProvider } nextStartingAfter } }`,
    );
    expect(page.body.data.billingTransactions).toEqual({
      items: [{ type: "top_up", amountMicros: 7_000_000, externalProvider: "local" }],
      nextStartingAfter: null,
    });
    const inv = await gql(
      owner.token,
      `mutation { createInvoice(periodStart: "2026-01-01", periodEnd: "2026-02-01") { id amountCents currency status lineItems { model } } }`,
    );
    expect(inv.body.data.createInvoice).toMatchObject({
      amountCents: 0,
      currency: "usd",
      status: "paid",
      lineItems: [],
    });
    const read = await gql(owner.token, `query($id: ID!) { invoice(id: $id) { id } }`, {
      id: inv.body.data.createInvoice.id,
    });
    expect(read.body.data.invoice.id).toBe(inv.body.data.createInvoice.id);
  });
});

describe("allotCents (micro-USD → cents, DESIGN §3 Money)", () => {
  test("when lines have fractions of a cent, then the total is rounded half up once and the lines sum to it", () => {
    expect(allotCents([])).toEqual({ total: 0, cents: [] });
    expect(allotCents([{ model: "a", micros: 5_000n }])).toEqual({ total: 1, cents: [1] });
    expect(allotCents([{ model: "a", micros: 4_999n }])).toEqual({ total: 0, cents: [0] });
    // Three lines of 0.4 cents: each rounded alone would be 0; the total 1.2 → 1 goes to one line.
    expect(
      allotCents([
        { model: "b", micros: 4_000n },
        { model: "a", micros: 4_000n },
        { model: "c", micros: 4_000n },
      ]),
    ).toEqual({ total: 1, cents: [0, 1, 0] });
    expect(
      allotCents([
        { model: "a", micros: 1_234_567n },
        { model: "b", micros: 7_654_321n },
      ]),
    ).toEqual({ total: 889, cents: [124, 765] });
  });
});

describe("isoDateTime (strict ISO 8601, review finding 7)", () => {
  const parse = (s: string) => isoDateTime.safeParse(s);
  test("when a date exists, then it parses to the instant it names", () => {
    expect(parse("2024-02-29").data?.toISOString()).toBe("2024-02-29T00:00:00.000Z");
    expect(parse("2024-02-29T23:59:59.9999+05:30").data?.toISOString()).toBe("2024-02-29T18:29:59.999Z");
    expect(parse("2024-12-31 23:59Z").data?.toISOString()).toBe("2024-12-31T23:59:00.000Z");
    expect(parse("2000-01-01T00:00:00-1400").data?.toISOString()).toBe("2000-01-01T14:00:00.000Z");
    expect(parse("2100-12-31T23:59:59Z").success).toBe(true);
  });
  test("when a date would roll over or is out of range, then it is refused", () => {
    for (const bad of [
      "2024-02-30",
      "2023-02-29",
      "2024-04-31",
      "2024-00-10",
      "2024-13-01",
      "2024-01-00",
      "0000-01-01",
      "1999-12-31T23:59:59Z",
      "2101-01-01",
      "2024-01-01T24:00:00Z",
      "2024-01-01T12:60:00Z",
      "2024-01-01T12:00:60Z",
      "2024-01-01T12:00:00+14:30",
      "2024-01-01T12:00:00+15:00",
      "2024-1-01",
      "yesterday",
    ]) {
      expect([bad, parse(bad).success]).toEqual([bad, false]);
    }
  });
});

describe("the local payment provider on a public URL (review finding 5)", () => {
  test("when the server starts with the local provider on a non-loopback URL, then a warning is logged", () => {
    const warned = logs.records().filter((r) => r.msg?.startsWith("PAYMENTS ARE NOT REAL"));
    expect(warned).toHaveLength(1);
    expect(warned[0]).toMatchObject({ level: 40, paymentProvider: "local", publicUrl: PUBLIC_URL });
  });
  test("when the URL is loopback or the provider is Stripe, then nothing is logged", () => {
    const lines: string[] = [];
    const logger = { warn: (_o: object, msg: string) => void lines.push(msg) };
    for (const url of ["http://localhost:8080", "http://127.0.0.1:9000", "http://[::1]:8080", "http://app.localhost"]) {
      expect(isLoopbackUrl(url)).toBe(true);
      expect(warnOfLocalPayments(logger, "local", url)).toBe(false);
    }
    expect(warnOfLocalPayments(logger, "stripe", "https://api.example.com")).toBe(false);
    expect(lines).toEqual([]);
    expect(warnOfLocalPayments(logger, "local", "http://10.0.0.5:8080")).toBe(true);
    expect(lines).toHaveLength(1);
  });
});
