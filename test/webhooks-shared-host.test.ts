/**
 * Review of issue 28, item 2 (session 15): the per-host bound was shared by every team, first
 * come, first served across teams, so a team pointing webhooks at a path that hangs on a host
 * another team also uses (a shared receiver, or the victim's own ingress) queued the victim's
 * healthy path behind its own hanging attempts (15.2 s here). The bound is now per team and host.
 */
import { CHAT_MODEL, type TestServer, createTestCaller, eventually, http, startTestServer } from "./support/harness.js";
import { type WebhookReceiver, startWebhookReceiver } from "./support/webhook-receiver.js";

const TIMEOUT_MS = 5_000;
let server: TestServer;
let shared: WebhookReceiver;

beforeAll(async () => {
  server = await startTestServer({
    webhookAllowPrivate: true,
    webhookHostConcurrency: 1,
    webhookRetryDelaysMs: "60000",
    webhookTimeoutMs: TIMEOUT_MS,
  });
  shared = await startWebhookReceiver();
}, 60_000);
afterAll(async () => {
  await server.close();
  await shared.close();
});

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

test("when another team queues hanging webhooks on a host a victim also uses, then the victim's healthy path gets its first attempt without waiting for any of them", async () => {
  const hostile = await createTestCaller(server.url);
  shared.script("/hang", ["hang"]);
  for (let i = 0; i < 3; i++) await chatWithWebhook(hostile.key, `${shared.url}/hang`);
  expect(await eventually(async () => shared.received.length >= 1, 10_000)).toBe(true);

  const victim = await createTestCaller(server.url);
  await chatWithWebhook(victim.key, `${shared.url}/ok`);
  const [delivery] = await server.db<{ committed_ms: number }>(
    "SELECT extract(epoch FROM created_at)::float8 * 1000 AS committed_ms FROM webhook_deliveries WHERE url = $1",
    [`${shared.url}/ok`],
  );
  expect(await eventually(async () => shared.received.some((r) => r.path === "/ok"), 4 * TIMEOUT_MS)).toBe(true);
  const got = shared.received.find((r) => r.path === "/ok")!;
  // Not behind a hanging attempt: each of those ends only at the 5 s ceiling (1 s is the Check's
  // figure; the bound here leaves a loaded machine room without letting one hanging attempt by).
  expect(got.at - delivery.committed_ms).toBeLessThan(TIMEOUT_MS - 1_000);
}, 120_000);
