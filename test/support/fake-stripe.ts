/**
 * A local stand-in for the Stripe API (issue 10, Checks): a `node:http` server answering the calls
 * the `stripe` SDK makes for top-ups and invoices (form-encoded bodies, JSON answers in Stripe's
 * shapes), honouring `Idempotency-Key` as Stripe does (the same key answers the first answer).
 * Point the SDK at it with config `stripeApiBase: server.url`. Every call is recorded.
 *
 * It also plays Stripe's side of the money after checkout (issue 10 review, findings 1–2):
 * `hang(path)` holds every call to a path unanswered until released (a slow or stuck Stripe), and
 * `events` builds the webhook deliveries Stripe sends — `checkout.session.completed` from a
 * session it opened (its real `amount_total`, `currency`, `metadata`), `charge.refunded` and
 * `charge.dispute.*` for that session's payment — signed as Stripe signs them (the SDK's
 * `generateTestHeaderString`: `t=<ts>,v1=HMAC-SHA256(secret, "<ts>.<payload>")`).
 */
import { randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import Stripe from "stripe";

/** One recorded call: method, path, the form body as a flat map (`line_items[0][quantity]` …), headers. */
export interface StripeCall {
  method: string;
  path: string;
  form: Record<string, string>;
  headers: IncomingMessage["headers"];
}

/** A webhook delivery: the JSON payload and its `Stripe-Signature` header. */
export interface SignedEvent {
  payload: string;
  signature: string;
}

/** The checkout sessions the fake opened, by id (what a completed event is built from). */
export interface FakeSession {
  id: string;
  amount_total: number;
  currency: string;
  metadata: Record<string, string>;
  /** The PaymentIntent the payment made (`pi_<session>`). */
  payment_intent: string;
  /** Its charge (`ch_<session>`). */
  charge: string;
}

export interface FakeStripe {
  url: string;
  calls: StripeCall[];
  sessions: Map<string, FakeSession>;
  /** Holds calls to `path` (e.g. `/v1/checkout/sessions`) unanswered until the returned release is called. */
  hang(path: string): () => void;
  /** Calls waiting on a hang right now. */
  held(): number;
  /** The next call to `path` answers a 400 card error (not kept under its idempotency key, as Stripe). */
  failNext(path: string): void;
  /** Webhook deliveries signed with `secret`, as Stripe sends them. */
  events(secret: string): FakeStripeEvents;
  close(): Promise<void>;
}

export interface FakeStripeEvents {
  /** Any event around `object`. */
  sign(type: string, object: Record<string, unknown>): SignedEvent;
  /** `checkout.session.completed` (paid) of a session the fake opened; `patch` overrides fields. */
  completed(sessionId: string, patch?: Record<string, unknown>): SignedEvent;
  /** `charge.refunded` of the session's charge, `amountRefunded` cents refunded so far in all. */
  refunded(
    sessionId: string,
    amountRefunded: number,
    refundIds: string[],
    patch?: Record<string, unknown>,
  ): SignedEvent;
  /** `charge.dispute.created` (or `.funds_reinstated`) of `amount` cents on the session's charge. */
  dispute(sessionId: string, disputeId: string, amount: number, type?: string): SignedEvent;
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

/** Starts the fake on a free loopback port. */
export async function startFakeStripe(): Promise<FakeStripe> {
  const calls: StripeCall[] = [];
  const byIdempotencyKey = new Map<string, { status: number; body: unknown }>();
  const invoices = new Map<string, Record<string, unknown>>();
  const sessions = new Map<string, FakeSession>();
  const hangs = new Map<string, Promise<void>>();
  const failing = new Set<string>();
  let waiting = 0;
  let seq = 0;
  const next = (prefix: string) => `${prefix}_test_${++seq}`;

  function answer(call: StripeCall): { status: number; body: unknown } {
    const { method, path, form } = call;
    if (method === "POST" && path === "/v1/checkout/sessions") {
      const id = next("cs");
      const metadata: Record<string, string> = {};
      for (const [k, v] of Object.entries(form)) {
        const m = /^metadata\[(.+)\]$/.exec(k);
        if (m) metadata[m[1]] = v;
      }
      sessions.set(id, {
        id,
        amount_total: Number(form["line_items[0][price_data][unit_amount]"]),
        currency: form["line_items[0][price_data][currency]"],
        metadata,
        payment_intent: `pi_${id}`,
        charge: `ch_${id}`,
      });
      return {
        status: 200,
        body: {
          id,
          object: "checkout.session",
          mode: form.mode,
          url: `https://checkout.stripe.test/c/pay/${id}`,
          client_reference_id: form.client_reference_id,
          amount_total: Number(form["line_items[0][price_data][unit_amount]"]),
          currency: form["line_items[0][price_data][currency]"],
          payment_status: "unpaid",
          status: "open",
          metadata,
        },
      };
    }
    if (method === "POST" && path === "/v1/customers") {
      return { status: 200, body: { id: next("cus"), object: "customer", name: form.name } };
    }
    if (method === "POST" && path === "/v1/invoices") {
      const inv = {
        id: next("in"),
        object: "invoice",
        customer: form.customer,
        status: "draft",
        amount_due: 0,
        total: 0,
        currency: "usd",
        hosted_invoice_url: null as string | null,
      };
      invoices.set(inv.id, inv);
      return { status: 200, body: inv };
    }
    if (method === "POST" && path === "/v1/invoiceitems") {
      const inv = invoices.get(form.invoice);
      if (!inv) return { status: 404, body: { error: { type: "invalid_request_error", message: "No such invoice" } } };
      inv.total = (inv.total as number) + Number(form.amount);
      inv.amount_due = inv.total;
      return {
        status: 200,
        body: { id: next("ii"), object: "invoiceitem", amount: Number(form.amount), invoice: inv.id },
      };
    }
    const finalize = /^\/v1\/invoices\/([^/]+)\/finalize$/.exec(path);
    if (method === "POST" && finalize) {
      const inv = invoices.get(finalize[1]);
      if (!inv) return { status: 404, body: { error: { type: "invalid_request_error", message: "No such invoice" } } };
      inv.status = inv.total === 0 ? "paid" : "open";
      inv.hosted_invoice_url = `https://invoice.stripe.test/i/${inv.id}`;
      return { status: 200, body: inv };
    }
    const pay = /^\/v1\/invoices\/([^/]+)\/pay$/.exec(path);
    if (method === "POST" && pay) {
      const inv = invoices.get(pay[1]);
      if (!inv) return { status: 404, body: { error: { type: "invalid_request_error", message: "No such invoice" } } };
      inv.status = "paid";
      return { status: 200, body: inv };
    }
    return {
      status: 404,
      body: { error: { type: "invalid_request_error", message: `Unrecognized request URL (${method}: ${path})` } },
    };
  }

  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    void (async () => {
      const text = await readBody(req);
      const url = new URL(req.url ?? "/", "http://stripe.test");
      const form = Object.fromEntries(new URLSearchParams(text));
      const call: StripeCall = { method: req.method ?? "GET", path: url.pathname, form, headers: req.headers };
      calls.push(call);
      const hung = hangs.get(call.path);
      if (hung) {
        waiting += 1;
        await hung;
        waiting -= 1;
      }
      if (failing.delete(call.path)) {
        res.writeHead(400, { "content-type": "application/json", "request-id": `req_${seq}` });
        res.end(JSON.stringify({ error: { type: "invalid_request_error", message: "Injected failure" } }));
        return;
      }
      const key = req.headers["idempotency-key"];
      if (typeof key === "string" && key.length > 255) {
        // As Stripe: idempotency keys are up to 255 characters.
        res.writeHead(400, { "content-type": "application/json", "request-id": `req_${seq}` });
        res.end(
          JSON.stringify({
            error: {
              type: "idempotency_error",
              message: "Keys for idempotent requests can only be up to 255 characters long.",
            },
          }),
        );
        return;
      }
      const idemKey = typeof key === "string" ? `${call.method} ${call.path} ${key}` : undefined;
      let out = idemKey ? byIdempotencyKey.get(idemKey) : undefined;
      if (!out) {
        out = answer(call);
        if (idemKey) byIdempotencyKey.set(idemKey, out);
      }
      res.writeHead(out.status, { "content-type": "application/json", "request-id": `req_${seq}` });
      res.end(JSON.stringify(out.body));
    })();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  const events = (secret: string): FakeStripeEvents => {
    const sign = (type: string, object: Record<string, unknown>): SignedEvent => {
      const payload = JSON.stringify({
        id: `evt_${randomUUID()}`,
        object: "event",
        type,
        api_version: "2025-01-01",
        created: Math.floor(Date.now() / 1000),
        data: { object },
      });
      return { payload, signature: Stripe.webhooks.generateTestHeaderString({ payload, secret }) };
    };
    const session = (id: string): FakeSession => {
      const s = sessions.get(id);
      if (!s) throw new Error(`fake Stripe opened no session ${id}`);
      return s;
    };
    return {
      sign,
      completed: (id, patch = {}) => {
        const s = session(id);
        return sign("checkout.session.completed", {
          id: s.id,
          object: "checkout.session",
          amount_total: s.amount_total,
          currency: s.currency,
          metadata: s.metadata,
          payment_intent: s.payment_intent,
          payment_status: "paid",
          status: "complete",
          ...patch,
        });
      },
      refunded: (id, amountRefunded, refundIds, patch = {}) => {
        const s = session(id);
        return sign("charge.refunded", {
          id: s.charge,
          object: "charge",
          amount: s.amount_total,
          amount_refunded: amountRefunded,
          currency: s.currency,
          metadata: s.metadata,
          payment_intent: s.payment_intent,
          refunded: amountRefunded >= s.amount_total,
          // Newest first, as Stripe lists them.
          refunds: { object: "list", data: [...refundIds].reverse().map((r) => ({ id: r, object: "refund" })) },
          ...patch,
        });
      },
      dispute: (id, disputeId, amount, type = "charge.dispute.created") => {
        const s = session(id);
        return sign(type, {
          id: disputeId,
          object: "dispute",
          amount,
          currency: s.currency,
          charge: s.charge,
          payment_intent: s.payment_intent,
          status: type === "charge.dispute.funds_reinstated" ? "won" : "needs_response",
        });
      },
    };
  };
  return {
    url: `http://127.0.0.1:${port}`,
    calls,
    sessions,
    hang: (path: string) => {
      let release!: () => void;
      hangs.set(path, new Promise<void>((resolve) => (release = resolve)));
      return () => {
        hangs.delete(path);
        release();
      };
    },
    held: () => waiting,
    failNext: (path: string) => {
      failing.add(path);
    },
    events,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
