/**
 * A local stand-in for the Stripe API (issue 10, Checks): a `node:http` server answering the calls
 * the `stripe` SDK makes for top-ups and invoices (form-encoded bodies, JSON answers in Stripe's
 * shapes), honouring `Idempotency-Key` as Stripe does (the same key answers the first answer).
 * Point the SDK at it with config `stripeApiBase: server.url`. Every call is recorded.
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

/** One recorded call: method, path, the form body as a flat map (`line_items[0][quantity]` …), headers. */
export interface StripeCall {
  method: string;
  path: string;
  form: Record<string, string>;
  headers: IncomingMessage["headers"];
}

export interface FakeStripe {
  url: string;
  calls: StripeCall[];
  close(): Promise<void>;
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
  let seq = 0;
  const next = (prefix: string) => `${prefix}_test_${++seq}`;

  function answer(call: StripeCall): { status: number; body: unknown } {
    const { method, path, form } = call;
    if (method === "POST" && path === "/v1/checkout/sessions") {
      const id = next("cs");
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
          metadata: {},
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
      const key = req.headers["idempotency-key"];
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
  return {
    url: `http://127.0.0.1:${port}`,
    calls,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
