/**
 * Webhook leases (issue 28, item 3; `src/services/events/webhooks/webhook-leases.ts`): a process
 * renews the lease of an attempt under way for as long as it runs, and aborts it as soon as a
 * renewal finds the delivery taken over by another process, so two processes never attempt one
 * delivery at once; what the aborted attempt records cannot move the new holder's delivery.
 */
import { v7 as uuidv7 } from "uuid";
import { type TestServer, createTestCaller, eventually, startTestServer } from "./support/harness.js";
import { type WebhookReceiver, startWebhookReceiver } from "./support/webhook-receiver.js";

let server: TestServer;
let receiver: WebhookReceiver;
let caller: Awaited<ReturnType<typeof createTestCaller>>;

beforeAll(async () => {
  // An attempt ceiling far longer than the 10 s lease a claim gives.
  server = await startTestServer({ webhookAllowPrivate: true, webhookRetryDelaysMs: "50", webhookTimeoutMs: 120_000 });
  receiver = await startWebhookReceiver();
  caller = await createTestCaller(server.url);
});
afterAll(async () => {
  await server.close();
  await receiver.close();
});

/** Inserts a due delivery to `path` of the receiver and wakes the dispatcher; returns its id. */
async function delivery(path: string): Promise<string> {
  const id = uuidv7();
  const responseId = uuidv7();
  await server.db(`INSERT INTO webhook_deliveries (id, team_id, response_id, url, body) VALUES ($1, $2, $3, $4, $5)`, [
    id,
    caller.teamId,
    responseId,
    `${receiver.url}${path}`,
    JSON.stringify({ id: responseId, status: "completed" }),
  ]);
  await server.db("SELECT pg_notify('switchyard_cache', 'webhook:')");
  return id;
}

test("when an attempt runs longer than a lease, then its process renews the lease and nobody can claim the delivery meanwhile", async () => {
  receiver.script("/slow", ["hang"]);
  const id = await delivery("/slow");
  expect(await eventually(async () => receiver.on("/slow").length === 1, 10_000)).toBe(true);
  const leases: number[] = [];
  for (let i = 0; i < 3; i++) {
    await new Promise((resolve) => setTimeout(resolve, 4_000));
    const [row] = await server.db<{ attempts: number; lease_left_ms: number }>(
      `SELECT attempts, extract(epoch FROM next_attempt_at - now())::float8 * 1000 AS lease_left_ms
         FROM webhook_deliveries WHERE id = $1`,
      [id],
    );
    expect(row.attempts).toBe(1);
    leases.push(row.lease_left_ms);
  }
  // 12 s after the claim its lease still runs (a claim alone leases for 10 s), and was renewed meanwhile.
  expect(Math.min(...leases)).toBeGreaterThan(0);
  expect(receiver.on("/slow")).toHaveLength(1);
  expect(receiver.on("/slow")[0].closedAt).toBeUndefined();
}, 30_000);

test("when another process takes over a delivery mid-attempt, then this process aborts its attempt before its own lease could have run out, and its record leaves the new holder's claim alone", async () => {
  receiver.script("/taken", ["hang"]);
  const id = await delivery("/taken");
  expect(await eventually(async () => receiver.on("/taken").length === 1, 10_000)).toBe(true);
  // What another process's claim does once the lease has run out: attempt 2, leased to it.
  await server.db(
    `UPDATE webhook_deliveries SET attempts = attempts + 1, next_attempt_at = now() + interval '1 hour' WHERE id = $1`,
    [id],
  );
  const takenAt = Date.now();
  // The next renewal (every 3 s) finds it taken over, or at the latest 7 s after the last renewal
  // (3 s before that lease could end) it is given up: its connection is closed either way.
  expect(await eventually(async () => receiver.on("/taken")[0].closedAt !== undefined, 8_000)).toBe(true);
  expect(receiver.on("/taken")[0].closedAt! - takenAt).toBeLessThan(8_000);
  let attempts: Array<{ attempt: number; error: string | null }> = [];
  expect(
    await eventually(async () => {
      attempts = await server.db("SELECT attempt, error FROM webhook_attempts WHERE delivery_id = $1", [id]);
      return attempts.length === 1;
    }, 5_000),
  ).toBe(true);
  expect(attempts).toEqual([{ attempt: 1, error: "aborted: the lease was lost" }]);
  const [row] = await server.db<{ attempts: number; status: string; leased: boolean }>(
    `SELECT attempts, status, next_attempt_at > now() + interval '50 minutes' AS leased FROM webhook_deliveries WHERE id = $1`,
    [id],
  );
  expect(row).toEqual({ attempts: 2, status: "pending", leased: true });
  expect(receiver.on("/taken")).toHaveLength(1);
}, 30_000);
