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
import { type TestServer, createTestUser, expectEnvelope, http, startTestServer } from "./support/harness.js";
import { type FakeStripe, startFakeStripe } from "./support/fake-stripe.js";

const WEBHOOK_SECRET = "whsec_test_switchyard";
let stripe: FakeStripe;
let server: TestServer;

beforeAll(async () => {
  stripe = await startFakeStripe();
  server = await startTestServer({
    signupCreditMicros: 0,
    publicUrl: "https://switchyard.example.test",
    paymentProvider: "stripe",
    stripeSecretKey: "sk_test_switchyard",
    stripeWebhookSecret: WEBHOOK_SECRET,
    stripeApiBase: stripe.url,
  });
}, 30_000);
afterAll(async () => {
  await server.close();
  await stripe.close();
});

const topUp = (token: string, nonce: string, amount: string) =>
  http(server.url, "POST", `/control/v1/billing/topups?nonce=${nonce}`, { token, body: { amount_usd: amount } });

/** A `checkout.session.completed` event for `sessionId`, as Stripe sends it. */
function completedEvent(sessionId: string, paymentStatus = "paid"): string {
  return JSON.stringify({
    id: `evt_${randomUUID()}`,
    object: "event",
    type: "checkout.session.completed",
    api_version: "2025-01-01",
    created: Math.floor(Date.now() / 1000),
    data: {
      object: {
        id: sessionId,
        object: "checkout.session",
        payment_status: paymentStatus,
        payment_intent: `pi_${sessionId}`,
        status: "complete",
      },
    },
  });
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
    expect(calls[0].headers["idempotency-key"]).toBe(`topup:${owner.teamId}:${nonce}`);
    expect(calls[0].form).toMatchObject({
      mode: "payment",
      "line_items[0][quantity]": "1",
      "line_items[0][price_data][currency]": "usd",
      "line_items[0][price_data][unit_amount]": "4200",
    });
    expectEnvelope(await topUp(owner.token, nonce, "43.00"), 409);
    expect(checkoutCalls().length).toBe(before + 1);
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
