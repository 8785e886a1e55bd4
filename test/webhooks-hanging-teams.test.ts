/**
 * Webhook receivers that hang, spread over several teams (review of issue 28, item 2: "no
 * delivery waits behind another receiver's slowness beyond a bounded per-receiver concurrency").
 * The dispatcher bounds attempts per destination host, per team (a quarter of the process's) and
 * per process; docs/webhooks.md says that "even then other teams keep three quarters of the
 * process". But four teams, each at its bound with hanging receivers (destination hosts are free
 * to make up: one port each here), hold every slot of the process, and a fifth team's healthy
 * receiver waited for the attempt ceiling (now a quarter is kept for teams with none under way).
 * Small settings here (process 16, host 1, so a team
 * bound of 4); the defaults (256, 4, 64) fall the same way to four teams with 16 hanging hosts each.
 */
import { CHAT_MODEL, type TestServer, createTestCaller, eventually, http, startTestServer } from "./support/harness.js";
import { type WebhookReceiver, startWebhookReceiver } from "./support/webhook-receiver.js";

const TIMEOUT_MS = 8_000;
const HOSTILE_TEAMS = 4;
const HOSTS_PER_TEAM = 4;

let server: TestServer;
const receivers: WebhookReceiver[] = [];

beforeAll(async () => {
  server = await startTestServer({
    webhookAllowPrivate: true,
    webhookConcurrency: 16,
    webhookHostConcurrency: 1,
    webhookRetryDelaysMs: "60000",
    webhookTimeoutMs: TIMEOUT_MS,
  });
}, 60_000);
afterAll(async () => {
  await server.close();
  await Promise.all(receivers.map((r) => r.close()));
});

async function receiver(): Promise<WebhookReceiver> {
  const r = await startWebhookReceiver();
  receivers.push(r);
  return r;
}

/** A chat completion whose completion webhook goes to `url`. */
async function chatWithWebhook(key: string, url: string): Promise<void> {
  const res = await http(server.url, "POST", "/v1/chat/completions", {
    token: key,
    body: {
      model: CHAT_MODEL,
      messages: [{ role: "user", content: "Sam" }],
      max_tokens: 2,
      metadata: { completion_webhook: url },
    },
  });
  expect(res.status).toBe(200);
}

test("when four teams each fill their bound with hanging receivers, then a fifth team's healthy receiver still gets its first attempt within 1 s of the terminal status", async () => {
  const hanging: WebhookReceiver[] = [];
  for (let t = 0; t < HOSTILE_TEAMS; t++) {
    const team = await createTestCaller(server.url);
    for (let h = 0; h < HOSTS_PER_TEAM; h++) {
      const r = await receiver();
      r.script("/hook", ["hang"]);
      hanging.push(r);
      await chatWithWebhook(team.key, `${r.url}/hook`);
    }
  }
  // Every hanging receiver holds its attempt.
  expect(await eventually(async () => hanging.every((r) => r.received.length === 1), 20_000)).toBe(true);

  const victim = await createTestCaller(server.url);
  const healthy = await receiver();
  await chatWithWebhook(victim.key, `${healthy.url}/hook`);
  expect(await eventually(async () => healthy.received.length === 1, TIMEOUT_MS + 5_000)).toBe(true);
  const [delivery] = await server.db<{ committed_ms: number }>(
    "SELECT extract(epoch FROM created_at)::float8 * 1000 AS committed_ms FROM webhook_deliveries WHERE url = $1",
    [`${healthy.url}/hook`],
  );
  const waitedMs = healthy.received[0].at - delivery.committed_ms;
  expect(waitedMs).toBeLessThanOrEqual(1_000);
}, 120_000);
