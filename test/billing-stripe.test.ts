/**
 * Billing with the Stripe provider (issue 10, items 5–6 and Checks): the official `stripe` SDK
 * talks to a local server speaking the Stripe API shapes it calls (`support/fake-stripe.ts`),
 * and webhooks are signed with the SDK's own `generateTestHeaderString` and verified for real.
 * Top-ups open one Checkout Session per nonce (concurrent requests included); a
 * `checkout.session.completed` delivered twice (also at once) credits once; a bad signature is a
 * 400 that credits nothing; invoices become a customer, an invoice, one item per model, finalized
 * and paid out of band.
 */
import { randomUUID } from "node:crypto";
import Stripe from "stripe";
import { LocalPaymentProvider } from "../src/services/billing/payment-provider.js";
import {
  type TestServer,
  type TestUser,
  createTestUser,
  expectEnvelope,
  http,
  startTestServer,
} from "./support/harness.js";
import { type FakeStripe, type SignedEvent, startFakeStripe } from "./support/fake-stripe.js";
import { captureLogs } from "./support/log-capture.js";

const WEBHOOK_SECRET = "whsec_test_switchyard";
const logs = captureLogs("warn");
let stripe: FakeStripe;
let server: TestServer;

beforeAll(async () => {
  stripe = await startFakeStripe();
  server = await startTestServer(
    {
      signupCreditMicros: 0,
      publicUrl: "https://switchyard.example.test",
      // A public URL makes signup invite-only by default; these tests sign teams up.
      signup: "open",
      paymentProvider: "stripe",
      stripeSecretKey: "sk_test_switchyard",
      stripeWebhookSecret: WEBHOOK_SECRET,
      stripeApiBase: stripe.url,
      // Below the default of 4, so the cap the tests meet is the setting's.
      providerCallsPerTeam: 3,
    },
    undefined,
    { logger: logs.logger },
  );
}, 30_000);
afterAll(async () => {
  await server.close();
  await stripe.close();
});

const topUp = (token: string, nonce: string, amount: string) =>
  http(server.url, "POST", `/control/v1/billing/topups?nonce=${encodeURIComponent(nonce)}`, {
    token,
    body: { amount_usd: amount },
  });

/** The id of the team's top-up session opened for `nonce`. */
async function topUpRowId(teamId: string, nonce: string): Promise<string> {
  const [row] = await server.db<{ id: string }>("SELECT id FROM topup_sessions WHERE team_id = $1 AND nonce = $2", [
    teamId,
    nonce,
  ]);
  return row.id;
}

/** A `checkout.session.completed` (paid unless told) of a session the fake opened, signed as Stripe does. */
function completedEvent(sessionId: string, paymentStatus = "paid"): string {
  return stripe.events(WEBHOOK_SECRET).completed(sessionId, { payment_status: paymentStatus }).payload;
}

function deliver(payload: string, signature?: string) {
  const header = signature ?? Stripe.webhooks.generateTestHeaderString({ payload, secret: WEBHOOK_SECRET });
  return http(server.url, "POST", "/control/v1/billing/stripe/webhook", {
    body: payload,
    headers: { "stripe-signature": header, "content-type": "application/json" },
  });
}

async function ledger(teamId: string) {
  return server.db<{ type: string; amount_micros: string; external_provider: string; external_payment_id: string }>(
    "SELECT type, amount_micros::text, external_provider, external_payment_id FROM credit_ledger WHERE team_id = $1",
    [teamId],
  );
}

const checkoutCalls = () => stripe.calls.filter((c) => c.path === "/v1/checkout/sessions");

describe("Stripe top-ups", () => {
  test("when the same nonce is sent concurrently, then one Checkout Session is opened at Stripe", async () => {
    const owner = await createTestUser(server.url);
    const before = checkoutCalls().length;
    const nonce = randomUUID();
    const answers = await Promise.all(Array.from({ length: 5 }, () => topUp(owner.token, nonce, "42.00")));
    for (const a of answers) expect(a.status).toBe(201);
    expect(new Set(answers.map((a) => a.body.payment_session_id)).size).toBe(1);
    expect(answers[0].body.payment_session_id).toMatch(/^cs_test_/);
    expect(answers[0].body.checkout_url).toBe(
      `https://checkout.stripe.test/c/pay/${answers[0].body.payment_session_id}`,
    );
    const calls = checkoutCalls().slice(before);
    expect(calls).toHaveLength(1);
    expect(calls[0].headers.authorization).toBe("Bearer sk_test_switchyard");
    expect(calls[0].headers["idempotency-key"]).toBe(`topup:${await topUpRowId(owner.teamId, nonce)}`);
    expect(calls[0].form).toMatchObject({
      mode: "payment",
      "line_items[0][quantity]": "1",
      "line_items[0][price_data][currency]": "usd",
      "line_items[0][price_data][unit_amount]": "4200",
    });
    expectEnvelope(await topUp(owner.token, nonce, "43.00"), 409);
    expect(checkoutCalls().length).toBe(before + 1);
  });

  test("when the nonce is 255 characters or not ASCII, then the Checkout Session opens (Stripe's idempotency key is short ASCII)", async () => {
    // Stripe refuses idempotency keys over 255 characters, and an HTTP header cannot carry
    // non-ASCII text: a key built from the caller's nonce failed (502) for every such nonce.
    const owner = await createTestUser(server.url);
    for (const nonce of ["n".repeat(255), `café-${randomUUID()}-日本`]) {
      const before = checkoutCalls().length;
      const res = await topUp(owner.token, nonce, "5.00");
      expect(res.status).toBe(201);
      expect(res.body.payment_session_id).toMatch(/^cs_test_/);
      const calls = checkoutCalls().slice(before);
      expect(calls).toHaveLength(1);
      expect(calls[0].headers["idempotency-key"]).toBe(`topup:${await topUpRowId(owner.teamId, nonce)}`);
      // The same nonce again answers the same session, with no second call.
      expect((await topUp(owner.token, nonce, "5.00")).body.payment_session_id).toBe(res.body.payment_session_id);
      expect(checkoutCalls().length).toBe(before + 1);
    }
  });

  test("when checkout.session.completed is delivered twice, then the session is credited once", async () => {
    const owner = await createTestUser(server.url);
    const session = (await topUp(owner.token, randomUUID(), "12.34")).body.payment_session_id as string;
    expect(await ledger(owner.teamId)).toEqual([]);
    const payload = completedEvent(session);
    // Twice at once, then once more later (Stripe retries and duplicates deliveries).
    const first = await Promise.all([deliver(payload), deliver(completedEvent(session))]);
    const again = await deliver(payload);
    for (const r of [...first, again]) {
      expect(r.status).toBe(200);
      expect(r.body).toEqual({ received: true });
    }
    expect(await ledger(owner.teamId)).toEqual([
      { type: "top_up", amount_micros: "12340000", external_provider: "stripe", external_payment_id: `pi_${session}` },
    ]);
    const [team] = await server.db<{ b: string }>("SELECT credit_balance_micros::text AS b FROM teams WHERE id = $1", [
      owner.teamId,
    ]);
    expect(team.b).toBe("12340000");
    const page = await http(server.url, "GET", "/control/v1/billing/transactions", { token: owner.token });
    expect(page.body.items).toEqual([
      expect.objectContaining({ type: "top_up", amount_micros: 12_340_000, external_provider: "stripe" }),
    ]);
  });

  test("when the signature is bad, missing or signed with another secret, then 400 and nothing is credited", async () => {
    const owner = await createTestUser(server.url);
    const session = (await topUp(owner.token, randomUUID(), "5.00")).body.payment_session_id as string;
    const payload = completedEvent(session);
    const good = Stripe.webhooks.generateTestHeaderString({ payload, secret: WEBHOOK_SECRET });
    expectEnvelope(await deliver(payload, "t=1,v1=deadbeef"), 400);
    expectEnvelope(
      await deliver(payload, Stripe.webhooks.generateTestHeaderString({ payload, secret: "whsec_other" })),
      400,
    );
    // A body altered after signing.
    expectEnvelope(await deliver(payload.replace(session, `${session}x`), good), 400);
    expectEnvelope(await http(server.url, "POST", "/control/v1/billing/stripe/webhook", { body: payload }), 400);
    // An unpaid session completes without credit; other events are acknowledged and ignored.
    expect((await deliver(completedEvent(session, "unpaid"))).status).toBe(200);
    expect(
      (
        await deliver(
          JSON.stringify({ id: "evt_x", object: "event", type: "customer.created", data: { object: { id: "cus_x" } } }),
        )
      ).status,
    ).toBe(200);
    expect(await ledger(owner.teamId)).toEqual([]);
  });
});

describe("Stripe invoices", () => {
  test("when a period had usage, then Stripe gets one item per model, finalized and paid out of band", async () => {
    const owner = await createTestUser(server.url);
    for (const [model, cost] of [
      ["model-a", 1_234_567],
      ["model-b", 7_654_321],
    ] as const) {
      await server.db(
        `INSERT INTO activity (id, team_id, type, status, endpoint, model, cost_micros, created_at)
         VALUES ($1, $2, 'standalone', 'completed', '/v1/chat/completions', $3, $4, '2026-03-10T00:00:00Z')`,
        [randomUUID(), owner.teamId, model, cost],
      );
    }
    const before = stripe.calls.length;
    const res = await http(server.url, "POST", "/control/v1/billing/invoices", {
      token: owner.token,
      body: { period_start: "2026-03-01T00:00:00Z", period_end: "2026-04-01T00:00:00Z" },
    });
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({
      amount_cents: 889,
      currency: "usd",
      status: "paid",
      period_start: "2026-03-01T00:00:00.000Z",
      period_end: "2026-04-01T00:00:00.000Z",
    });
    expect(res.body.payment_invoice_id).toMatch(/^in_test_/);
    expect(res.body.hosted_invoice_url).toBe(`https://invoice.stripe.test/i/${res.body.payment_invoice_id}`);
    const calls = stripe.calls.slice(before);
    expect(calls.map((c) => c.path)).toEqual([
      "/v1/customers",
      "/v1/invoices",
      "/v1/invoiceitems",
      "/v1/invoiceitems",
      `/v1/invoices/${res.body.payment_invoice_id}/finalize`,
      `/v1/invoices/${res.body.payment_invoice_id}/pay`,
    ]);
    expect(calls[2].form).toMatchObject({ amount: "124", currency: "usd", invoice: res.body.payment_invoice_id });
    expect(calls[3].form).toMatchObject({ amount: "765", currency: "usd" });
    expect(calls[5].form).toMatchObject({ paid_out_of_band: "true" });

    // A second period reuses the team's customer.
    const second = await http(server.url, "POST", "/control/v1/billing/invoices", {
      token: owner.token,
      body: { period_start: "2026-02-01T00:00:00Z", period_end: "2026-03-01T00:00:00Z" },
    });
    expect(second.status).toBe(201);
    expect(second.body.amount_cents).toBe(0);
    expect(stripe.calls.slice(before).filter((c) => c.path === "/v1/customers")).toHaveLength(1);
  });
});

const send = (e: SignedEvent) => deliver(e.payload, e.signature);

async function balanceOf(teamId: string): Promise<string> {
  const [team] = await server.db<{ b: string }>("SELECT credit_balance_micros::text AS b FROM teams WHERE id = $1", [
    teamId,
  ]);
  return team.b;
}

/** A team with a paid Stripe top-up of `amount`; answers the owner and the Checkout Session id. */
async function paidTopUp(amount: string): Promise<{ owner: TestUser; session: string }> {
  const owner = await createTestUser(server.url);
  const res = await topUp(owner.token, randomUUID(), amount);
  expect(res.status).toBe(201);
  const session = res.body.payment_session_id as string;
  expect((await send(stripe.events(WEBHOOK_SECRET).completed(session))).status).toBe(200);
  return { owner, session };
}

async function until(what: string, ok: () => boolean | Promise<boolean>): Promise<void> {
  for (let i = 0; i < 600; i++) {
    if (await ok()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`timed out waiting for ${what}`);
}

describe("Stripe webhooks: what does not match is refused (review finding 2)", () => {
  test("when a paid session's amount, currency or metadata differ from the top-up, then nothing is credited and an error is logged", async () => {
    const owner = await createTestUser(server.url);
    const other = await createTestUser(server.url);
    const session = (await topUp(owner.token, randomUUID(), "10.00")).body.payment_session_id as string;
    const events = stripe.events(WEBHOOK_SECRET);
    const from = logs.lines.length;
    const meta = stripe.sessions.get(session)!.metadata;
    for (const patch of [
      { amount_total: 100_000 },
      { currency: "eur" },
      { metadata: { ...meta, switchyard_team_id: other.teamId } },
      { metadata: {} },
    ]) {
      expect((await send(events.completed(session, patch))).status).toBe(200);
    }
    expect(await ledger(owner.teamId)).toEqual([]);
    expect(await ledger(other.teamId)).toEqual([]);
    const refused = logs.records(from).filter((r) => r.msg?.includes("does not match its top-up"));
    expect(refused).toHaveLength(4);
    expect(refused[0]).toMatchObject({ level: 50, topUpId: meta.switchyard_topup_id, teamId: owner.teamId });
    // The real delivery still credits.
    expect((await send(events.completed(session))).status).toBe(200);
    expect(await balanceOf(owner.teamId)).toBe("10000000");
  });
});

describe("Stripe refunds and disputes debit the ledger (review finding 2)", () => {
  test("when a charge is refunded in parts, then each new refund is debited once with its refund id as source", async () => {
    const { owner, session } = await paidTopUp("20.00");
    const events = stripe.events(WEBHOOK_SECRET);
    const first = events.refunded(session, 500, ["re_a1"]);
    // Delivered twice at once, then once more.
    for (const r of [...(await Promise.all([send(first), send(first)])), await send(first)]) {
      expect(r.status).toBe(200);
    }
    expect(await balanceOf(owner.teamId)).toBe("15000000");
    expect((await send(events.refunded(session, 800, ["re_a1", "re_a2"]))).status).toBe(200);
    // An older delivery arriving late changes nothing.
    expect((await send(events.refunded(session, 500, ["re_a1"]))).status).toBe(200);
    expect(await balanceOf(owner.teamId)).toBe("12000000");
    const entries = await server.db<{ type: string; amount_micros: string; source_id: string }>(
      "SELECT type, amount_micros::text, source_id FROM credit_ledger WHERE team_id = $1 ORDER BY created_at, id",
      [owner.teamId],
    );
    expect(entries.map((e) => [e.type, e.amount_micros, e.source_id])).toEqual([
      ["top_up", "20000000", expect.any(String)],
      ["refund", "-5000000", "re_a1"],
      ["refund", "-3000000", "re_a2"],
    ]);
    const page = await http(server.url, "GET", "/control/v1/billing/transactions", { token: owner.token });
    expect(page.body.items[0]).toMatchObject({
      type: "refund",
      amount_micros: -3_000_000,
      balance_after_micros: 12_000_000,
      external_provider: "stripe",
      external_payment_id: `pi_${session}`,
    });
  });

  test("when a dispute takes more than the balance covers, then what there is is debited, the shortfall recorded and logged; a won dispute credits it back", async () => {
    const { owner, session } = await paidTopUp("20.00");
    const events = stripe.events(WEBHOOK_SECRET);
    expect((await send(events.refunded(session, 800, ["re_b1"]))).status).toBe(200);
    expect(await balanceOf(owner.teamId)).toBe("12000000");
    const from = logs.lines.length;
    const dispute = events.dispute(session, `dp_${randomUUID()}`, 2000);
    expect((await send(dispute)).status).toBe(200);
    expect((await send(dispute)).status).toBe(200);
    expect(await balanceOf(owner.teamId)).toBe("0");
    const [reversal] = await server.db<Record<string, string>>(
      `SELECT kind, amount_micros::text, debited_micros::text, shortfall_micros::text
         FROM payment_reversals WHERE team_id = $1 AND kind = 'dispute'`,
      [owner.teamId],
    );
    expect(reversal).toEqual({
      kind: "dispute",
      amount_micros: "20000000",
      debited_micros: "12000000",
      shortfall_micros: "8000000",
    });
    const warned = logs.records(from).filter((r) => r.msg?.includes("did not cover it"));
    expect(warned).toHaveLength(1);
    expect(warned[0]).toMatchObject({ level: 40, teamId: owner.teamId, shortfallMicros: "8000000" });
    const [low] = await server.db<{ n: string }>(
      "SELECT count(*) AS n FROM credit_ledger WHERE team_id = $1 AND balance_after_micros < 0",
      [owner.teamId],
    );
    expect(low.n).toBe("0");

    // Won: what the dispute debited comes back, once.
    const won = JSON.parse(dispute.payload).data.object.id as string;
    const reinstated = events.dispute(session, won, 2000, "charge.dispute.funds_reinstated");
    expect((await send(reinstated)).status).toBe(200);
    expect((await send(reinstated)).status).toBe(200);
    expect(await balanceOf(owner.teamId)).toBe("12000000");
  });

  test("when a shortfall is owed, then the next top-up pays it back first, once; a dispute won after part was collected credits back the debit and what was collected", async () => {
    const { owner, session } = await paidTopUp("10.00");
    const events = stripe.events(WEBHOOK_SECRET);
    // A refund of 5 and a dispute of 10 against a 10 USD top-up: 5 debited, 5 short.
    expect((await send(events.refunded(session, 500, ["re_s1"]))).status).toBe(200);
    const disputeId = `dp_${randomUUID()}`;
    expect((await send(events.dispute(session, disputeId, 1000))).status).toBe(200);
    expect(await balanceOf(owner.teamId)).toBe("0");

    // A 3 USD top-up: all of it goes to the shortfall (3 of 5 collected).
    const second = (await topUp(owner.token, randomUUID(), "3.00")).body.payment_session_id as string;
    const paid = events.completed(second);
    expect((await send(paid)).status).toBe(200);
    expect((await send(paid)).status).toBe(200); // delivered twice: collected once
    expect(await balanceOf(owner.teamId)).toBe("0");
    // An 8 USD top-up: the last 2 of the shortfall, 6 left.
    const third = (await topUp(owner.token, randomUUID(), "8.00")).body.payment_session_id as string;
    expect((await send(events.completed(third))).status).toBe(200);
    expect(await balanceOf(owner.teamId)).toBe("6000000");
    const [owed] = await server.db<Record<string, string>>(
      `SELECT debited_micros::text, shortfall_micros::text, collected_micros::text
         FROM payment_reversals WHERE team_id = $1 AND kind = 'dispute'`,
      [owner.teamId],
    );
    expect(owed).toEqual({ debited_micros: "5000000", shortfall_micros: "5000000", collected_micros: "5000000" });
    const collections = await server.db<{ amount_micros: string; source_id: string }>(
      "SELECT amount_micros::text, source_id FROM credit_ledger WHERE team_id = $1 AND source_id LIKE 'collect:%' ORDER BY created_at",
      [owner.teamId],
    );
    expect(collections.map((c) => c.amount_micros)).toEqual(["-3000000", "-2000000"]);
    // The ledger still adds up to the balance.
    const [sum] = await server.db<{ s: string }>(
      "SELECT sum(amount_micros)::text AS s FROM credit_ledger WHERE team_id = $1",
      [owner.teamId],
    );
    expect(sum.s).toBe("6000000");

    // Won: the 5 debited and the 5 collected come back.
    expect((await send(events.dispute(session, disputeId, 1000, "charge.dispute.funds_reinstated"))).status).toBe(200);
    expect(await balanceOf(owner.teamId)).toBe("16000000");
  });

  test("when a refund arrives before its top-up is credited, then 409 (Stripe delivers it again) and it is debited once the top-up is", async () => {
    const owner = await createTestUser(server.url);
    const session = (await topUp(owner.token, randomUUID(), "10.00")).body.payment_session_id as string;
    const events = stripe.events(WEBHOOK_SECRET);
    const early = events.refunded(session, 400, ["re_e1"]);
    expectEnvelope(await send(early), 409);
    expect(await balanceOf(owner.teamId)).toBe("0");
    expect((await send(events.completed(session))).status).toBe(200);
    expect(await balanceOf(owner.teamId)).toBe("10000000");
    expect((await send(early)).status).toBe(200);
    expect(await balanceOf(owner.teamId)).toBe("6000000");
  });

  test("when a refund is in another currency, names another team, or is of a payment that is not ours, then nothing is debited", async () => {
    const { owner, session } = await paidTopUp("10.00");
    const other = await createTestUser(server.url);
    const events = stripe.events(WEBHOOK_SECRET);
    const from = logs.lines.length;
    expect((await send(events.refunded(session, 100, ["re_c1"], { currency: "eur" }))).status).toBe(200);
    expect(
      (
        await send(
          events.refunded(session, 100, ["re_c2"], {
            metadata: { switchyard_team_id: other.teamId },
          }),
        )
      ).status,
    ).toBe(200);
    expect((await send(events.refunded(session, 100, ["re_c3"], { payment_intent: "pi_someone_else" }))).status).toBe(
      200,
    );
    expect(await balanceOf(owner.teamId)).toBe("10000000");
    expect(logs.records(from).filter((r) => r.msg?.includes("does not match its top-up"))).toHaveLength(2);
  });
});

describe("Stripe calls hold no database connection (review finding 1)", () => {
  test("when Stripe hangs with more top-ups waiting than the pool has connections, then other teams are still served; a team is capped", async () => {
    const release = stripe.hang("/v1/checkout/sessions");
    const before = checkoutCalls().length;
    // The pool has 20 connections (src/db/data-source.ts); 8 teams × 3 (the per-team cap) = 24 waiting calls.
    const teams = await Promise.all(Array.from({ length: 8 }, () => createTestUser(server.url)));
    const pending: Array<Promise<Awaited<ReturnType<typeof topUp>>>> = [];
    const nonces = teams.map(() => Array.from({ length: 3 }, () => randomUUID()));
    let released = false;
    try {
      teams.forEach((t, i) => nonces[i].forEach((n) => pending.push(topUp(t.token, n, "5.00"))));
      await until("24 Checkout calls held at Stripe", () => stripe.held() === 24);
      // The same nonce again joins its call (no fifth call for the team, no second session).
      const joined = topUp(teams[0].token, nonces[0][0], "5.00");
      // A fourth top-up of a team at its cap: 429 at once, with Retry-After.
      const capped = await topUp(teams[0].token, randomUUID(), "5.00");
      expectEnvelope(capped, 429);
      expect(capped.headers.get("retry-after")).toBe("5");

      // Other teams are served meanwhile: signup, reads, and an invoice through Stripe's other calls.
      const other = await createTestUser(server.url);
      const page = await http(server.url, "GET", "/control/v1/billing/transactions", { token: other.token });
      expect(page.status).toBe(200);
      const inv = await http(server.url, "POST", "/control/v1/billing/invoices", {
        token: other.token,
        body: { period_start: "2026-05-01T00:00:00Z", period_end: "2026-06-01T00:00:00Z" },
      });
      expect(inv.status).toBe(201);
      expect(stripe.held()).toBe(24);

      release();
      released = true;
      const answers = await Promise.all(pending);
      for (const a of answers) expect(a.status).toBe(201);
      expect(new Set(answers.map((a) => a.body.payment_session_id)).size).toBe(24);
      expect((await joined).body).toEqual(answers[0].body);
      expect(checkoutCalls().length - before).toBe(24);
    } finally {
      if (!released) release();
      await Promise.allSettled(pending);
    }
  });

  test("when Stripe fails, then 502 and the nonce keeps its amount; the same request again opens the session", async () => {
    const owner = await createTestUser(server.url);
    const nonce = randomUUID();
    stripe.failNext("/v1/checkout/sessions");
    expectEnvelope(await topUp(owner.token, nonce, "9.00"), 502);
    const [row] = await server.db<{ external_session_id: string | null; claimed_until: Date | null }>(
      "SELECT external_session_id, claimed_until FROM topup_sessions WHERE team_id = $1 AND nonce = $2",
      [owner.teamId, nonce],
    );
    expect(row).toEqual({ external_session_id: null, claimed_until: null });
    expectEnvelope(await topUp(owner.token, nonce, "9.50"), 409);
    const again = await topUp(owner.token, nonce, "9.00");
    expect(again.status).toBe(201);
    expect(again.body.payment_session_id).toMatch(/^cs_test_/);
    expect((await topUp(owner.token, nonce, "9.00")).body).toEqual(again.body);
  });

  test("when a session is left opening by a process that died, then it is taken over once its claim lapses; while claimed, 409 retry", async () => {
    const owner = await createTestUser(server.url);
    const lapsed = randomUUID();
    const held = randomUUID();
    for (const [nonce, claim] of [
      [lapsed, "now() - interval '1 second'"],
      [held, "now() + interval '1 hour'"],
    ]) {
      await server.db(
        `INSERT INTO topup_sessions (id, team_id, nonce, amount_micros, provider, claimed_until)
         VALUES ($1, $2, $3, 3000000, 'stripe', ${claim})`,
        [randomUUID(), owner.teamId, nonce],
      );
    }
    const taken = await topUp(owner.token, lapsed, "3.00");
    expect(taken.status).toBe(201);
    expect(taken.body.payment_session_id).toMatch(/^cs_test_/);
    const busy = await topUp(owner.token, held, "3.00");
    expectEnvelope(busy, 409);
    expect(busy.body.detail).toMatch(/still being opened/);
  });
});

describe("local confirm links after a switch to Stripe (review finding 5)", () => {
  test("when a local link made before the switch is opened, then 404 and nothing is credited", async () => {
    const owner = await createTestUser(server.url);
    const id = randomUUID();
    await server.db(
      `INSERT INTO topup_sessions (id, team_id, nonce, amount_micros, provider, external_session_id)
       VALUES ($1, $2, $3, 50000000, 'local', $4)`,
      [id, owner.teamId, randomUUID(), id],
    );
    // Signed with the server's own secret: a genuine link of the local provider.
    const local = new LocalPaymentProvider(
      "test-secret-test-secret-test-secret-0123",
      "https://switchyard.example.test",
    );
    const link = new URL(
      (
        await local.createCheckout({
          sessionId: id,
          teamId: owner.teamId,
          nonce: "n",
          amountMicros: 50_000_000n,
          amountCents: 5000,
        })
      ).checkoutUrl,
    );
    expectEnvelope(await http(server.url, "GET", link.pathname + link.search), 404);
    expect(await balanceOf(owner.teamId)).toBe("0");
  });
});
