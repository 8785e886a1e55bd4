/**
 * The webhook delivery log and manual redelivery (issue 27, item 6): REST
 * (`/control/v1/webhooks/deliveries…`) and GraphQL (`webhookDeliveries`, `webhookDelivery`,
 * `redeliverWebhook`) over two real servers:
 * - `guarded`, with the default SSRF guard (`SWITCHYARD_WEBHOOK_ALLOW_PRIVATE` unset): a loopback
 *   callback is refused, and the refusal, naming the setting, is in the log the team reads;
 * - `open`, with loopback allowed and one retry, sending to a real receiver that fails until a
 *   manual redelivery, which goes out through the dispatcher with the request's token and a fresh
 *   signature.
 * Each endpoint: success, bad input (400 naming the field), 401, another team's delivery 404.
 */
import { v7 as uuidv7 } from "uuid";
import { signWebhook } from "../src/services/events/webhooks/webhook-target.js";
import { captureLogs } from "./support/log-capture.js";
import {
  CHAT_MODEL,
  type TestServer,
  type TestUser,
  createTestCaller,
  createTestUser,
  eventually,
  expectEnvelope,
  expectInvalid,
  http,
  startTestServer,
} from "./support/harness.js";
import { joinTeam } from "./support/teams.js";
import { type WebhookReceiver, closedPort, startWebhookReceiver } from "./support/webhook-receiver.js";

const TOKEN = "delivery-log-token-7d2e1a";
const REFUSAL = /^refused: private address \(loopback\); set SWITCHYARD_WEBHOOK_ALLOW_PRIVATE=true to allow$/;
const LIST = "/control/v1/webhooks/deliveries";

let guarded: TestServer;
let open: TestServer;
let receiver: WebhookReceiver;
const logs = captureLogs("info");

beforeAll(async () => {
  [guarded, open, receiver] = await Promise.all([
    startTestServer({ webhookRetryDelaysMs: "20" }, undefined, { logger: logs.logger }),
    startTestServer({ webhookAllowPrivate: true, webhookRetryDelaysMs: "20", webhookTimeoutMs: 2000 }),
    startWebhookReceiver(),
  ]);
  expect(guarded.app.config.webhookAllowPrivate).toBe(false);
}, 60_000);
afterAll(async () => {
  await guarded?.close();
  await open?.close();
  await receiver?.close();
});

/** A stored response of `caller`'s team whose metadata names `url` (and the token). @returns its id. */
async function respondWithWebhook(server: TestServer, caller: TestUser, url: string): Promise<string> {
  const res = await http(server.url, "POST", "/v1/responses", {
    token: caller.token,
    body: {
      model: CHAT_MODEL,
      input: "Sam",
      max_output_tokens: 4,
      metadata: { completion_webhook: url, webhook_token: TOKEN },
    },
  });
  expect(res.status).toBe(200);
  return res.body.id;
}

/** The delivery of `responseId` as the log lists it, once its status is `status`. */
async function deliveryOf(server: TestServer, caller: TestUser, responseId: string, status: string): Promise<any> {
  let found: any;
  await eventually(async () => {
    const res = await http(server.url, "GET", `${LIST}?response_id=${responseId}`, { token: caller.token });
    found = res.body.items?.[0];
    return found?.status === status;
  }, 15_000);
  expect(found).toMatchObject({ response_id: responseId, status });
  return found;
}

describe("with the default SSRF guard", () => {
  let owner: TestUser;
  let other: TestUser;
  let responseId: string;
  let delivery: any;
  let port: number;

  beforeAll(async () => {
    owner = await createTestCaller(guarded.url);
    other = await createTestUser(guarded.url);
    port = await closedPort();
    responseId = await respondWithWebhook(guarded, owner, `http://127.0.0.1:${port}/hook?sig=abc`);
    delivery = await deliveryOf(guarded, owner, responseId, "failed");
  }, 30_000);

  test("when a loopback callback is refused, then the team reads the refusal, naming the setting, in the delivery log", async () => {
    expect(delivery).toMatchObject({
      object: "webhook_delivery",
      url: `http://127.0.0.1:${port}/hook?sig=abc`,
      last_error: expect.stringMatching(REFUSAL),
      next_attempt_at: null,
      finished_at: expect.any(String),
      redeliverable: true,
      redeliverable_until: expect.any(String),
    });
    expect(delivery.attempts).toEqual([
      {
        attempt: 1,
        at: expect.any(String),
        status_code: null,
        error: expect.stringMatching(REFUSAL),
        latency_ms: expect.any(Number),
      },
    ]);
    // The detail is the same object; the token is in neither.
    const detail = await http(guarded.url, "GET", `${LIST}/${delivery.id}`, { token: owner.token });
    expect(detail.status).toBe(200);
    expect(detail.body).toEqual(delivery);
    expect(detail.text).not.toContain(TOKEN);
    // The server's log line names the setting too.
    const line = logs.records().find((r) => r.msg === "webhook delivery failed" && r.deliveryId === delivery.id);
    expect(line?.error).toMatch(REFUSAL);
  });

  test("when the list is paged and filtered, then it pages newest first and filters by status and response", async () => {
    const second = await respondWithWebhook(guarded, owner, `http://[::1]:${port}/again`);
    await deliveryOf(guarded, owner, second, "failed");
    const first = await http(guarded.url, "GET", `${LIST}?limit=1`, { token: owner.token });
    expect(first.status).toBe(200);
    expect(first.body.items.map((d: any) => d.response_id)).toEqual([second]);
    expect(first.body.next_starting_after).toBe(first.body.items[0].id);
    const next = await http(guarded.url, "GET", `${LIST}?limit=1&starting_after=${first.body.next_starting_after}`, {
      token: owner.token,
    });
    expect(next.body.items.map((d: any) => d.response_id)).toEqual([responseId]);
    const failed = await http(guarded.url, "GET", `${LIST}?status=failed`, { token: owner.token });
    expect(failed.body.items).toHaveLength(2);
    const delivered = await http(guarded.url, "GET", `${LIST}?status=delivered`, { token: owner.token });
    expect(delivered.body).toEqual({ items: [], next_starting_after: null });
  });

  test("when the input is bad, then 400 names the field", async () => {
    const t = { token: owner.token };
    expectInvalid(await http(guarded.url, "GET", `${LIST}?status=lost`, t), "status");
    expectInvalid(await http(guarded.url, "GET", `${LIST}?limit=0`, t), "limit");
    expectInvalid(await http(guarded.url, "GET", `${LIST}?response_id=nope`, t), "response_id");
    // A cursor of another team is refused like an unknown one.
    const theirs = await http(guarded.url, "GET", `${LIST}?starting_after=${delivery.id}`, { token: other.token });
    expectInvalid(theirs, "starting_after");
    expectInvalid(await http(guarded.url, "GET", `${LIST}/nope`, t), "delivery_id");
    expectInvalid(await http(guarded.url, "POST", `${LIST}/nope/redeliver`, t), "delivery_id");
  });

  test("when no credentials are presented, then 401", async () => {
    expectEnvelope(await http(guarded.url, "GET", LIST), 401);
    expectEnvelope(await http(guarded.url, "GET", `${LIST}/${delivery.id}`), 401);
    expectEnvelope(await http(guarded.url, "POST", `${LIST}/${delivery.id}/redeliver`), 401);
  });

  test("when another team asks for the delivery, then 404, and its list does not show it", async () => {
    const t = { token: other.token };
    expectEnvelope(await http(guarded.url, "GET", `${LIST}/${delivery.id}`, t), 404);
    expectEnvelope(await http(guarded.url, "POST", `${LIST}/${delivery.id}/redeliver`, t), 404);
    const theirs = await http(guarded.url, "GET", `${LIST}?response_id=${responseId}`, t);
    expect(theirs.body.items).toEqual([]);
  });

  test("when a member redelivers, then 403 (owners and admins do)", async () => {
    const member = await joinTeam(guarded.url, owner, "member");
    expect((await http(guarded.url, "GET", `${LIST}/${delivery.id}`, { token: member.token })).status).toBe(200);
    expectEnvelope(await http(guarded.url, "POST", `${LIST}/${delivery.id}/redeliver`, { token: member.token }), 403);
  });

  test("when a refused delivery is redelivered, then it goes through the guard again: a second refused attempt", async () => {
    const own = await respondWithWebhook(guarded, owner, `http://localhost:${port}/retry`);
    const failed = await deliveryOf(guarded, owner, own, "failed");
    const res = await http(guarded.url, "POST", `${LIST}/${failed.id}/redeliver`, { token: owner.token });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ id: failed.id, status: "pending", redeliverable: false, finished_at: null });
    expect(res.body.attempts).toHaveLength(1);
    let again: any;
    await eventually(async () => {
      again = (await http(guarded.url, "GET", `${LIST}/${failed.id}`, { token: owner.token })).body;
      return again.status === "failed" && again.attempts.length === 2;
    }, 10_000);
    expect(again.attempts.map((a: any) => [a.attempt, a.status_code, a.error])).toEqual([
      [1, null, expect.stringMatching(REFUSAL)],
      [2, null, expect.stringMatching(REFUSAL)],
    ]);
    expect(again.redeliverable).toBe(true);
  });

  test("when a failed delivery is no longer kept, or its team keeps no data, then redelivery is 409 saying so", async () => {
    const own = await respondWithWebhook(guarded, owner, `http://127.0.0.1:${port}/old`);
    const failed = await deliveryOf(guarded, owner, own, "failed");
    await guarded.db("UPDATE webhook_deliveries SET kept_until = now() - interval '1 second' WHERE id = $1", [
      failed.id,
    ]);
    const late = await http(guarded.url, "POST", `${LIST}/${failed.id}/redeliver`, { token: owner.token });
    expectEnvelope(late, 409);
    expect(late.body.detail).toMatch(/can no longer be redelivered/);

    const zdr = await createTestCaller(guarded.url);
    const patched = await http(guarded.url, "PATCH", "/control/v1/teams/me", {
      token: zdr.token,
      body: { zero_data_retention_enabled: true },
    });
    expect(patched.status).toBe(200);
    const forgotten = await deliveryOf(
      guarded,
      zdr,
      await respondWithWebhook(guarded, zdr, `http://127.0.0.1:${port}/z`),
      "failed",
    );
    expect(forgotten.redeliverable).toBe(false);
    const [row] = await guarded.db<{ body: unknown; token: string | null; token_sealed: Buffer | null }>(
      "SELECT body, token, token_sealed FROM webhook_deliveries WHERE id = $1",
      [forgotten.id],
    );
    expect(row).toEqual({ body: null, token: null, token_sealed: null });
    expectEnvelope(await http(guarded.url, "POST", `${LIST}/${forgotten.id}/redeliver`, { token: zdr.token }), 409);
  });

  test("when GraphQL reads and redelivers, then it answers as REST does", async () => {
    const gql = (token: string, query: string, variables: Record<string, unknown> = {}) =>
      http(guarded.url, "POST", "/graphql", { token, body: { query, variables } });
    const read = await gql(
      owner.token,
      `query($r: ID) { webhookDeliveries(responseId: $r) { items { id status url attempts { attempt statusCode error latencyMs } } nextStartingAfter } }`,
      { r: responseId },
    );
    expect(read.body.errors).toBeUndefined();
    expect(read.body.data.webhookDeliveries.items).toEqual([
      {
        id: delivery.id,
        status: "failed",
        url: delivery.url,
        attempts: [
          { attempt: 1, statusCode: null, error: expect.stringMatching(REFUSAL), latencyMs: expect.any(Number) },
        ],
      },
    ]);
    const one = await gql(owner.token, `query($id: ID!) { webhookDelivery(id: $id) { id lastError } }`, {
      id: delivery.id,
    });
    expect(one.body.data.webhookDelivery).toEqual({ id: delivery.id, lastError: expect.stringMatching(REFUSAL) });

    const bad = await gql(owner.token, `{ webhookDeliveries(status: "lost") { nextStartingAfter } }`);
    expect(bad.body.errors[0].extensions).toMatchObject({ status_code: 400 });
    expect(bad.body.errors[0].extensions.extra.map((i: any) => i.field)).toContain("status");

    const redeliver = `mutation($id: ID!) { redeliverWebhook(id: $id) { id status attempts { attempt } } }`;
    const theirs = await gql(other.token, redeliver, { id: delivery.id });
    expect(theirs.body.errors[0].extensions).toMatchObject({ status_code: 404 });
    const done = await gql(owner.token, redeliver, { id: delivery.id });
    expect(done.body.errors).toBeUndefined();
    expect(done.body.data.redeliverWebhook).toEqual({ id: delivery.id, status: "pending", attempts: [{ attempt: 1 }] });
    await deliveryOf(guarded, owner, responseId, "failed");
  });
});

describe("with loopback allowed, against a real receiver", () => {
  test("when the receiver fails every attempt, then the delivery fails with each answer logged, and a manual redelivery sends it again with its token and a fresh signature", async () => {
    const owner = await createTestCaller(open.url);
    const secret = await http(open.url, "PATCH", "/control/v1/teams/me", {
      token: owner.token,
      body: { webhook_signing_secret: "rotate" },
    });
    expect(secret.status).toBe(200);
    const signingSecret: string = secret.body.webhook_signing_secret;
    // Two failures (the first try and its one retry), then a working receiver.
    receiver.script("/flaky", [{ status: 500 }, { status: 500 }, { status: 200 }]);
    const responseId = await respondWithWebhook(open, owner, `${receiver.url}/flaky`);
    const failed = await deliveryOf(open, owner, responseId, "failed");
    expect(failed.attempts.map((a: any) => [a.attempt, a.status_code, a.error])).toEqual([
      [1, 500, "HTTP 500"],
      [2, 500, "HTTP 500"],
    ]);
    expect(failed).toMatchObject({ redeliverable: true, last_error: "HTTP 500" });
    // Kept for the redelivery: the body, and the token sealed (never in plaintext once ended).
    const [kept] = await open.db<{ token: string | null; token_sealed: Buffer | null; body: unknown }>(
      "SELECT token, token_sealed, body FROM webhook_deliveries WHERE id = $1",
      [failed.id],
    );
    expect(kept.token).toBeNull();
    expect(kept.token_sealed).toBeInstanceOf(Buffer);
    expect(kept.token_sealed!.includes(Buffer.from(TOKEN))).toBe(false);
    expect(kept.body).toMatchObject({ id: responseId });

    const res = await http(open.url, "POST", `${LIST}/${failed.id}/redeliver`, { token: owner.token });
    expect(res.status).toBe(200);
    expect(res.body.status).toBe("pending");
    const delivered = await deliveryOf(open, owner, responseId, "delivered");
    expect(delivered.attempts.map((a: any) => [a.attempt, a.status_code, a.error])).toEqual([
      [1, 500, "HTTP 500"],
      [2, 500, "HTTP 500"],
      [3, 200, null],
    ]);
    expect(delivered).toMatchObject({ last_error: null, redeliverable: false, redeliverable_until: null });

    const sent = receiver.on("/flaky");
    expect(sent).toHaveLength(3);
    const again = sent[2];
    expect(again.body).toBe(sent[0].body);
    expect(again.headers.authorization).toBe(`Bearer ${TOKEN}`);
    expect(again.headers["webhook-id"]).toBe(responseId);
    const timestamp = Number(again.headers["webhook-timestamp"]);
    expect(again.headers["webhook-signature"]).toBe(signWebhook(signingSecret, responseId, timestamp, again.body));

    // Delivered: nothing more to send, and nothing kept.
    const twice = await http(open.url, "POST", `${LIST}/${failed.id}/redeliver`, { token: owner.token });
    expectEnvelope(twice, 409);
    expect(twice.body.detail).toMatch(/was delivered/);
    const [ended] = await open.db<{ token: string | null; token_sealed: Buffer | null; body: unknown }>(
      "SELECT token, token_sealed, body FROM webhook_deliveries WHERE id = $1",
      [failed.id],
    );
    expect(ended).toEqual({ token: null, token_sealed: null, body: null });
  }, 40_000);

  test("when a process died during a delivery's last attempt, then it ends failed but kept, and a redelivery sends it with its token", async () => {
    const owner = await createTestCaller(open.url);
    const [id, responseId] = [uuidv7(), uuidv7()];
    // Leased by a dead process for its last attempt (1 try + 1 retry here); the lease has run out.
    await open.db(
      `INSERT INTO webhook_deliveries (id, team_id, response_id, url, token, body, attempts, next_attempt_at)
       VALUES ($1, $2, $3, $4, 'tk-orphan', $5, 2, now() - interval '1 second')`,
      [id, owner.teamId, responseId, `${receiver.url}/orphan`, JSON.stringify({ id: responseId, status: "completed" })],
    );
    const failed = await deliveryOf(open, owner, responseId, "failed");
    expect(failed).toMatchObject({ id, last_error: "attempt interrupted", attempts: [], redeliverable: true });
    const [kept] = await open.db<{ token: string | null; token_sealed: Buffer | null }>(
      "SELECT token, token_sealed FROM webhook_deliveries WHERE id = $1",
      [id],
    );
    expect(kept.token).toBeNull();
    expect(kept.token_sealed).toBeInstanceOf(Buffer);

    expect((await http(open.url, "POST", `${LIST}/${id}/redeliver`, { token: owner.token })).status).toBe(200);
    const delivered = await deliveryOf(open, owner, responseId, "delivered");
    expect(delivered.attempts.map((a: any) => [a.attempt, a.status_code])).toEqual([[3, 200]]);
    const [sent] = receiver.on("/orphan");
    expect(sent.headers.authorization).toBe("Bearer tk-orphan");
    expect(JSON.parse(sent.body)).toEqual({ id: responseId, status: "completed" });
  }, 30_000);
});
