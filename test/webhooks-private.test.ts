/**
 * Webhook SSRF rules with the default `SWITCHYARD_WEBHOOK_ALLOW_PRIVATE=false` (DESIGN §3
 * Webhooks): a callback URL naming or resolving to a loopback address is refused before any
 * connection (a counting listener on loopback sees none), the create is unaffected, the refusal is
 * recorded as the delivery's attempt and logged — without the webhook token.
 */
import net from "node:net";
import { captureLogs } from "./support/log-capture.js";
import { CHAT_MODEL, type TestServer, createTestCaller, eventually, http, startTestServer } from "./support/harness.js";

let server: TestServer;
let app: TestServer["app"];
let listener: net.Server;
let port: number;
let connections = 0;
const logs = captureLogs("debug");
const lines = logs.lines;
const TOKEN = "secret-webhook-token-4f1c9e";

beforeAll(async () => {
  // Counts every TCP connection on loopback (IPv4 and, where the host has it, IPv6).
  listener = net.createServer((socket) => {
    connections++;
    socket.destroy();
  });
  await new Promise<void>((resolve) => listener.listen(0, "127.0.0.1", resolve));
  port = (listener.address() as net.AddressInfo).port;
  server = await startTestServer({ webhookRetryDelaysMs: "20,20,20", webhookTimeoutMs: 1000 }, undefined, {
    logger: logs.logger,
  });
  app = server.app;
  expect(app.config.webhookAllowPrivate).toBe(false);
});
afterAll(async () => {
  await server.close();
  await new Promise<void>((resolve) => listener.close(() => resolve()));
});

test.each([
  ["an IPv4 loopback literal", () => `http://127.0.0.1:${port}/hook`],
  ["a name resolving to loopback", () => `http://localhost:${port}/hook`],
  ["an IPv4-mapped IPv6 literal", () => `http://[::ffff:127.0.0.1]:${port}/hook`],
  ["an IPv6 loopback literal", () => `http://[::1]:${port}/hook`],
  ["the metadata address", () => `http://169.254.169.254/latest/meta-data`],
])(
  "when the callback URL is %s, then no connection is made, the create is unaffected and the refusal is recorded",
  async (_name, url) => {
    const caller = await createTestCaller(app.url);
    const res = await http(app.url, "POST", "/v1/responses", {
      token: caller.key,
      body: {
        model: CHAT_MODEL,
        input: "Sam",
        max_output_tokens: 4,
        metadata: { completion_webhook: url(), webhook_token: TOKEN },
      },
    });
    expect(res.status).toBe(200);
    expect(res.body.error).toBeNull();
    let delivery: { id: string; status: string } | undefined;
    await eventually(async () => {
      [delivery] = await server.db<{ id: string; status: string }>(
        "SELECT id, status FROM webhook_deliveries WHERE response_id = $1",
        [res.body.id],
      );
      return delivery?.status === "failed";
    }, 10_000);
    expect(delivery?.status).toBe("failed");
    const attempts = await server.db<{ status_code: number | null; error: string }>(
      "SELECT status_code, error FROM webhook_attempts WHERE delivery_id = $1",
      [delivery!.id],
    );
    // A refused address is final: one recorded attempt, no retries.
    expect(attempts).toHaveLength(1);
    expect(attempts[0].status_code).toBeNull();
    expect(attempts[0].error).toMatch(
      /^refused: private address \(.*\); set SWITCHYARD_WEBHOOK_ALLOW_PRIVATE=true to allow$/,
    );
    expect(connections).toBe(0);
    const failedLog = logs.records().find((l) => l.msg === "webhook delivery failed" && l.deliveryId === delivery!.id);
    expect(failedLog).toBeDefined();
    expect(failedLog?.responseId).toBe(res.body.id);
    // The log line names the setting that lifts the refusal (issue 27, item 6).
    expect(failedLog?.error).toContain("set SWITCHYARD_WEBHOOK_ALLOW_PRIVATE=true to allow");
  },
);

test("when deliveries failed, then no log line carries the webhook token", () => {
  expect(lines.length).toBeGreaterThan(0);
  for (const line of lines) expect(line).not.toContain(TOKEN);
});
