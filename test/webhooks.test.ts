/**
 * Completion webhooks (issue 6, item 3; spec: Events, Completion webhook; DESIGN §3 Webhooks)
 * against a real receiver on loopback, with the schedule and the attempt ceiling shrunk by
 * configuration (`SWITCHYARD_WEBHOOK_RETRY_DELAYS_MS`, `SWITCHYARD_WEBHOOK_TIMEOUT_MS`) and loopback
 * allowed (`SWITCHYARD_WEBHOOK_ALLOW_PRIVATE=true`).
 */
import { execFileSync } from "node:child_process";
import { createHmac } from "node:crypto";
import { mkdtempSync, readFileSync } from "node:fs";
import https from "node:https";
import type { AddressInfo } from "node:net";
import os from "node:os";
import path from "node:path";
import tls from "node:tls";
import {
  CHAT_MODEL,
  EMBED_MODEL,
  type TestServer,
  createTestCaller,
  eventually,
  http,
  startTestServer,
} from "./support/harness.js";
import { type WebhookReceiver, closedPort, startWebhookReceiver } from "./support/webhook-receiver.js";

// Long enough that a loaded 2-core CI machine answers a loopback receiver within it (at 400 ms a
// first attempt once timed out there), short enough that the hanging-receiver tests stay quick.
const TIMEOUT_MS = 1_500;
let server: TestServer;
let receiver: WebhookReceiver;
/** Receivers that hang live on their own host: a hanging host's slots stay taken for a while. */
let hangingReceiver: WebhookReceiver;
let caller: Awaited<ReturnType<typeof createTestCaller>>;

beforeAll(async () => {
  server = await startTestServer({
    webhookAllowPrivate: true,
    webhookRetryDelaysMs: "50,100,150",
    webhookTimeoutMs: TIMEOUT_MS,
  });
  receiver = await startWebhookReceiver();
  hangingReceiver = await startWebhookReceiver();
  caller = await createTestCaller(server.url);
});
afterAll(async () => {
  await server.close();
  await receiver.close();
  await hangingReceiver.close();
});

interface DeliveryRow {
  id: string;
  status: string;
  attempts: number;
  token: string | null;
  body: unknown;
}
interface AttemptRow {
  attempt: number;
  status_code: number | null;
  latency_ms: number;
  error: string | null;
}

/** The delivery of `responseId` once it has ended (delivered or failed), with its attempts. */
async function finishedDelivery(responseId: string): Promise<{ delivery: DeliveryRow; attempts: AttemptRow[] }> {
  let delivery: DeliveryRow | undefined;
  await eventually(async () => {
    [delivery] = await server.db<DeliveryRow>(
      "SELECT id, status, attempts, token, body FROM webhook_deliveries WHERE response_id = $1",
      [responseId],
    );
    return delivery !== undefined && delivery.status !== "pending";
  }, 15_000);
  if (!delivery) throw new Error(`no delivery for ${responseId}`);
  const attempts = await server.db<AttemptRow>(
    "SELECT attempt, status_code, latency_ms, error FROM webhook_attempts WHERE delivery_id = $1 ORDER BY attempt",
    [delivery.id],
  );
  return { delivery, attempts };
}

function createResponse(metadata: Record<string, unknown>, token = caller.key) {
  return http(server.url, "POST", "/v1/responses", {
    token,
    body: { model: CHAT_MODEL, input: "Sam", max_output_tokens: 8, metadata },
  });
}

describe("delivery", () => {
  test("when the receiver answers 500 twice then 200, then exactly 3 deliveries carry the stored response, the token and a stable webhook-id", async () => {
    receiver.script("/flaky", [{ status: 500 }, { status: 500 }, { status: 200 }]);
    const res = await createResponse({ completion_webhook: `${receiver.url}/flaky`, webhook_token: "tok-123" });
    expect(res.status).toBe(200);
    const { delivery, attempts } = await finishedDelivery(res.body.id);
    expect(delivery.status).toBe("delivered");
    // Once ended, the outbox keeps neither the token nor the body; the attempts stay.
    expect(delivery.token).toBeNull();
    expect(delivery.body).toBeNull();
    expect(attempts.map((a) => a.status_code)).toEqual([500, 500, 200]);
    expect(attempts.map((a) => a.error)).toEqual(["HTTP 500", "HTTP 500", null]);
    const got = receiver.on("/flaky");
    expect(got).toHaveLength(3);
    const stored = await http(server.url, "GET", `/v1/responses/${res.body.id}`, { token: caller.key });
    for (const r of got) {
      expect(r.method).toBe("POST");
      expect(r.headers["content-type"]).toBe("application/json");
      expect(r.headers.authorization).toBe("Bearer tok-123");
      expect(r.headers["webhook-id"]).toBe(res.body.id);
      expect(r.headers["webhook-timestamp"]).toMatch(/^\d+$/);
      // No signing secret on the team: no signature.
      expect(r.headers["webhook-signature"]).toBeUndefined();
      expect(JSON.parse(r.body)).toEqual(stored.body);
    }
    expect(JSON.parse(got[0].body)).toMatchObject({ id: res.body.id, status: res.body.status });
  });

  test("when the receiver never answers, then each attempt ends at the configured ceiling and all 4 are recorded", async () => {
    hangingReceiver.script("/hang", ["hang"]);
    const res = await createResponse({ completion_webhook: `${hangingReceiver.url}/hang` });
    expect(res.status).toBe(200);
    const { delivery, attempts } = await finishedDelivery(res.body.id);
    expect(delivery.status).toBe("failed");
    expect(attempts).toHaveLength(4);
    for (const a of attempts) {
      expect(a.status_code).toBeNull();
      expect(a.error).toBe(`timed out after ${TIMEOUT_MS} ms`);
      expect(a.latency_ms).toBeGreaterThanOrEqual(TIMEOUT_MS - 5);
    }
    expect(hangingReceiver.on("/hang")).toHaveLength(4);
  });

  test("when one team's receivers never answer, then another team's webhook is delivered while that team's still hang", async () => {
    hangingReceiver.script("/hang-team", ["hang"]);
    receiver.script("/other-team", [{ status: 200 }]);
    // Its own team, so the backlog of hanging attempts (20 × 4 at the ceiling, 4 at a time) does
    // not hold up the later tests' deliveries behind the per-team bound.
    const noisyTeam = await createTestCaller(server.url);
    const noisy = await Promise.all(
      Array.from({ length: 20 }, () =>
        createResponse({ completion_webhook: `${hangingReceiver.url}/hang-team` }, noisyTeam.key),
      ),
    );
    for (const r of noisy) expect(r.status).toBe(200);
    await eventually(async () => hangingReceiver.on("/hang-team").length >= 4);
    const other = await createTestCaller(server.url);
    const res = await createResponse({ completion_webhook: `${receiver.url}/other-team` }, other.key);
    const { delivery } = await finishedDelivery(res.body.id);
    expect(delivery.status).toBe("delivered");
    // At most 4 of the noisy team's attempts ever ran at once (each ended at the ceiling).
    await eventually(
      async () =>
        (
          await server.db<any>(
            "SELECT count(*)::int AS n FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id WHERE d.team_id = $1",
            [noisyTeam.teamId],
          )
        )[0].n >= 12,
      15_000,
    );
    const spans = await server.db<any>(
      `SELECT extract(epoch FROM a.at) * 1000 - a.latency_ms AS start_ms, extract(epoch FROM a.at) * 1000 AS end_ms
         FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id WHERE d.team_id = $1`,
      [noisyTeam.teamId],
    );
    const edges = spans.flatMap((x) => [
      [Number(x.start_ms) + 20, 1], // allow 20 ms of clock slack between start and recorded latency
      [Number(x.end_ms), -1],
    ]);
    edges.sort((p, q) => p[0] - q[0] || p[1] - q[1]);
    let open = 0;
    let most = 0;
    for (const [, step] of edges) most = Math.max(most, (open += step));
    expect(most).toBeLessThanOrEqual(4);
  }, 30_000);

  test("when the receiver refuses connections, then 4 attempts are recorded and the create answers as without a webhook", async () => {
    const port = await closedPort();
    const res = await createResponse({ completion_webhook: `http://127.0.0.1:${port}/gone`, webhook_token: "t" });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ object: "response", error: null });
    const { delivery, attempts } = await finishedDelivery(res.body.id);
    expect(delivery.status).toBe("failed");
    expect(attempts.map((a) => a.attempt)).toEqual([1, 2, 3, 4]);
    for (const a of attempts) expect(a.error).toBe("ECONNREFUSED");
    // The response stays as it was (spec rule 6).
    const stored = await http(server.url, "GET", `/v1/responses/${res.body.id}`, { token: caller.key });
    expect(stored.body).toEqual(res.body);
  });

  test("when the receiver redirects, then the redirect is not followed and each answer counts as a failure", async () => {
    receiver.script("/moved", [{ status: 302, headers: { location: `${receiver.url}/target` } }]);
    const res = await createResponse({ completion_webhook: `${receiver.url}/moved` });
    const { delivery, attempts } = await finishedDelivery(res.body.id);
    expect(delivery.status).toBe("failed");
    expect(attempts.map((a) => [a.status_code, a.error])).toEqual(
      Array.from({ length: 4 }, () => [302, "redirect not followed"]),
    );
    expect(attempts[0].error).toBe("redirect not followed");
    expect(receiver.on("/target")).toHaveLength(0);
  });

  test("when a chat completion names a webhook without a token, then the chat completion arrives with status and no Authorization header", async () => {
    const res = await http(server.url, "POST", "/v1/chat/completions", {
      token: caller.key,
      body: {
        model: CHAT_MODEL,
        messages: [{ role: "user", content: "Sam" }],
        max_tokens: 8,
        metadata: { completion_webhook: `${receiver.url}/chat` },
      },
    });
    expect(res.status).toBe(200);
    const requestId = String(res.body.id).replace(/^chatcmpl-/, "");
    const { delivery } = await finishedDelivery(requestId);
    expect(delivery.status).toBe("delivered");
    expect(delivery.token).toBeNull();
    const [got] = receiver.on("/chat");
    expect(got.headers.authorization).toBeUndefined();
    expect(got.headers["webhook-id"]).toBe(res.body.id);
    expect(JSON.parse(got.body)).toEqual({ ...res.body, status: "completed" });
  });

  test("when an embeddings request names a webhook, then the embedding list is delivered", async () => {
    const res = await http(server.url, "POST", "/v1/embeddings", {
      token: caller.key,
      body: { model: EMBED_MODEL, input: "hello", metadata: { completion_webhook: `${receiver.url}/embed` } },
    });
    expect(res.status).toBe(200);
    expect(await eventually(async () => receiver.on("/embed").length === 1, 10_000)).toBe(true);
    expect(JSON.parse(receiver.on("/embed")[0].body)).toEqual({ ...res.body, status: "completed" });
  });

  test.each([
    ["not a URL", "not a url"],
    ["another scheme", "ftp://127.0.0.1/x"],
    ["user info", "http://user:pw@127.0.0.1/x"],
    ["a non-string", 42],
    ["an empty string", ""],
  ])("when completion_webhook is %s, then the create answers 200 and nothing is delivered", async (_name, url) => {
    const res = await createResponse({ completion_webhook: url, webhook_token: "x" });
    expect(res.status).toBe(200);
    expect(["completed", "incomplete"]).toContain(res.body.status);
    await server.app.metering.drainAll();
    const rows = await server.db("SELECT 1 FROM webhook_deliveries WHERE response_id = $1", [res.body.id]);
    expect(rows).toHaveLength(0);
  });

  test("when a response is stored with store: false, then its webhook still delivers the response object", async () => {
    const res = await http(server.url, "POST", "/v1/responses", {
      token: caller.key,
      body: {
        model: CHAT_MODEL,
        input: "Sam",
        max_output_tokens: 4,
        store: false,
        metadata: { completion_webhook: `${receiver.url}/nostore` },
      },
    });
    expect(res.status).toBe(200);
    expect(await eventually(async () => receiver.on("/nostore").length === 1, 10_000)).toBe(true);
    expect(JSON.parse(receiver.on("/nostore")[0].body)).toEqual(res.body);
  });
});

describe("https", () => {
  test("when the URL is https, then TLS names the URL's host (SNI) and an untrusted certificate fails the attempt", async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "webhook-tls-"));
    execFileSync(
      "openssl",
      [
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=localhost",
        "-addext",
        "subjectAltName=DNS:localhost",
        "-keyout",
        path.join(dir, "key.pem"),
        "-out",
        path.join(dir, "cert.pem"),
      ],
      { stdio: "ignore" },
    );
    const key = readFileSync(path.join(dir, "key.pem"));
    const cert = readFileSync(path.join(dir, "cert.pem"));
    const names: string[] = [];
    let requests = 0;
    const tlsServer = https.createServer(
      {
        key,
        cert,
        SNICallback: (name, cb) => {
          names.push(name);
          cb(null, tls.createSecureContext({ key, cert }));
        },
      },
      (_req, res) => {
        requests++;
        res.end("ok");
      },
    );
    await new Promise<void>((resolve) => tlsServer.listen(0, "127.0.0.1", resolve));
    try {
      const port = (tlsServer.address() as AddressInfo).port;
      const res = await createResponse({ completion_webhook: `https://localhost:${port}/tls` });
      expect(res.status).toBe(200);
      const { delivery, attempts } = await finishedDelivery(res.body.id);
      expect(delivery.status).toBe("failed");
      expect(attempts).toHaveLength(4);
      // The self-signed certificate is not trusted: verification stays on.
      for (const a of attempts) expect(a.error).toMatch(/CERT|SELF_SIGNED/);
      expect(names[0]).toBe("localhost");
      expect(requests).toBe(0);
    } finally {
      tlsServer.closeAllConnections();
      await new Promise<void>((resolve) => tlsServer.close(() => resolve()));
    }
  });
});

describe("signing", () => {
  test("when the team has a signing secret, then webhook-signature verifies over id.timestamp.body with the secret", async () => {
    const owner = await createTestCaller(server.url);
    const patched = await http(server.url, "PATCH", "/control/v1/teams/me", {
      token: owner.token,
      body: { webhook_signing_secret: "rotate" },
    });
    expect(patched.status).toBe(200);
    const secret: string = patched.body.webhook_signing_secret;
    expect(secret).toMatch(/^whsec_/);
    const res = await createResponse({ completion_webhook: `${receiver.url}/signed` }, owner.key);
    expect(res.status).toBe(200);
    expect(await eventually(async () => receiver.on("/signed").length === 1, 10_000)).toBe(true);
    const [got] = receiver.on("/signed");
    const id = String(got.headers["webhook-id"]);
    const timestamp = String(got.headers["webhook-timestamp"]);
    const key = Buffer.from(secret.slice("whsec_".length), "base64");
    const expected = createHmac("sha256", key).update(`${id}.${timestamp}.${got.body}`).digest("base64");
    expect(got.headers["webhook-signature"]).toBe(`v1,${expected}`);
  });
});
