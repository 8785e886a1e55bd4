/**
 * Prometheus metrics at `/metrics` (issue 13, item 4): scraped after real traffic, the counters
 * the traffic should move have moved (HTTP by route pattern and status, engine tokens and queue
 * wait by model, group-commit flushes, webhook attempts), Node's defaults are there, and access
 * follows `SWITCHYARD_METRICS_TOKEN` (loopback only when unset: a server on every interface, scraped
 * through this machine's non-loopback address, answers 403).
 */
import http from "node:http";
import os from "node:os";
import type { AddressInfo } from "node:net";
import {
  CHAT_MODEL,
  EMBED_MODEL,
  type TestServer,
  createTestCaller,
  eventually,
  expectEnvelope,
  http as call,
  startTestServer,
} from "./support/harness.js";

let server: TestServer;

beforeAll(async () => {
  server = await startTestServer({ webhookAllowPrivate: true });
}, 60_000);
afterAll(() => server.close());

/** The value of the sample `name{labels}` in an exposition text (labels in any order); undefined when absent. */
function sample(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  for (const line of text.split("\n")) {
    if (!line.startsWith(name)) continue;
    const match = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!match || match[1] !== name) continue;
    const got = Object.fromEntries(
      [...(match[2] ?? "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((m) => [m[1], m[2]]),
    );
    if (Object.entries(labels).every(([k, v]) => got[k] === v)) return Number(match[3]);
  }
  return undefined;
}

async function scrape(token?: string): Promise<string> {
  const res = await fetch(`${server.url}/metrics`, token ? { headers: { authorization: `Bearer ${token}` } } : {});
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toContain("text/plain");
  return res.text();
}

test("when traffic has been served, then the scrape shows it by route, status and model, with the group commit, webhooks and Node's defaults", async () => {
  const caller = await createTestCaller(server.url);
  // A webhook receiver on loopback for one delivered attempt.
  const receiver = http.createServer((req, res) => {
    req.resume();
    req.on("end", () => res.writeHead(200).end("ok"));
  });
  await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
  const hook = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
  try {
    const before = await scrape();
    const chat = await call(server.url, "POST", "/v1/chat/completions", {
      token: caller.key,
      body: {
        model: CHAT_MODEL,
        messages: [{ role: "user", content: "Tom" }],
        max_tokens: 4,
        metadata: { webhook_url: hook },
      },
    });
    expect(chat.status).toBe(200);
    // Webhooks announce stored Responses.
    const response = await call(server.url, "POST", "/v1/responses", {
      token: caller.key,
      body: { model: CHAT_MODEL, input: "Sam", max_output_tokens: 4, metadata: { completion_webhook: hook } },
    });
    expect(response.status).toBe(200);
    const embed = await call(server.url, "POST", "/v1/embeddings", {
      token: caller.key,
      body: { model: EMBED_MODEL, input: "a cat" },
    });
    expect(embed.status).toBe(200);
    const bad = await call(server.url, "GET", "/v1/responses/not-an-id", { token: caller.key });
    expect(bad.status).toBeGreaterThanOrEqual(400);

    let after = "";
    expect(
      await eventually(async () => {
        after = await scrape();
        return (sample(after, "switchyard_webhook_attempts_total", { outcome: "delivered" }) ?? 0) >= 1;
      }, 10_000),
    ).toBe(true);
    const chatRoute = { method: "POST", route: "/v1/chat/completions", status: "200" };
    expect(sample(after, "switchyard_http_requests_total", chatRoute)).toBe(
      (sample(before, "switchyard_http_requests_total", chatRoute) ?? 0) + 1,
    );
    expect(sample(after, "switchyard_http_request_duration_seconds_count", chatRoute)).toBeGreaterThanOrEqual(1);
    // Ids never become labels: the pattern does.
    expect(after).toContain(`route="/v1/responses/:response_id"`);
    expect(after).not.toContain("not-an-id");

    const gen = { model: CHAT_MODEL, operation: "generate" };
    expect(sample(after, "switchyard_engine_completion_tokens_total", gen)).toBeGreaterThan(
      sample(before, "switchyard_engine_completion_tokens_total", gen) ?? 0,
    );
    expect(
      sample(after, "switchyard_engine_prompt_tokens_total", { model: EMBED_MODEL, operation: "embed" }),
    ).toBeGreaterThan(0);
    expect(sample(after, "switchyard_engine_queue_wait_seconds_count", gen)).toBeGreaterThanOrEqual(1);
    expect(sample(after, "switchyard_engine_requests_total", { ...gen, outcome: "ok" })).toBeGreaterThanOrEqual(1);
    expect(sample(after, "switchyard_metering_flushes_total")).toBeGreaterThan(
      sample(before, "switchyard_metering_flushes_total") ?? 0,
    );
    expect(sample(after, "switchyard_metering_flush_rows_total")).toBeGreaterThanOrEqual(2);
    expect(sample(after, "switchyard_metering_flush_seconds_total")).toBeGreaterThan(0);
    // Flush size and latency as histograms: one observation per group commit, rows summed.
    expect(sample(after, "switchyard_metering_flush_size_rows_count")).toBe(
      sample(after, "switchyard_metering_flushes_total"),
    );
    expect(sample(after, "switchyard_metering_flush_size_rows_sum")).toBe(
      sample(after, "switchyard_metering_flush_rows_total"),
    );
    expect(sample(after, "switchyard_metering_flush_duration_seconds_count")).toBe(
      sample(after, "switchyard_metering_flushes_total"),
    );
    // Tokens per second by model: one observation per generation that produced tokens.
    expect(sample(after, "switchyard_engine_tokens_per_second_count", { model: CHAT_MODEL })).toBeGreaterThan(
      sample(before, "switchyard_engine_tokens_per_second_count", { model: CHAT_MODEL }) ?? 0,
    );
    expect(sample(after, "switchyard_engine_tokens_per_second_sum", { model: CHAT_MODEL })).toBeGreaterThan(0);
    expect(sample(after, "switchyard_nodejs_eventloop_lag_seconds")).toBeDefined();
    expect(sample(after, "switchyard_process_resident_memory_bytes")).toBeGreaterThan(0);
    expect(after).toContain("# TYPE switchyard_job_queue_depth gauge");
    expect(after).toContain("# TYPE switchyard_job_queue_oldest_age_seconds gauge");
  } finally {
    await new Promise((resolve) => receiver.close(resolve));
  }
});

describe("with SWITCHYARD_METRICS_TOKEN", () => {
  const token = "metrics-token-0123456789";
  let guarded: TestServer;
  beforeAll(async () => {
    guarded = await startTestServer({ metricsToken: token });
  }, 60_000);
  afterAll(() => guarded.close());

  test("when the scrape has no token or a wrong one, then 401; with it, the metrics", async () => {
    expectEnvelope(await call(guarded.url, "GET", "/metrics"), 401);
    expectEnvelope(await call(guarded.url, "GET", "/metrics", { token: "metrics-token-wrong-000" }), 401);
    const ok = await fetch(`${guarded.url}/metrics`, { headers: { authorization: `Bearer ${token}` } });
    expect(ok.status).toBe(200);
    expect(await ok.text()).toContain("switchyard_http_requests_total");
  });
});

describe("without SWITCHYARD_METRICS_TOKEN", () => {
  let open: TestServer;
  beforeAll(async () => {
    // Listening on every interface, so a client can reach it from a non-loopback address (the
    // local payment provider allowed there: issue 27, item 2).
    open = await startTestServer({ host: "0.0.0.0", localPayments: "allow" }, server);
  }, 60_000);
  afterAll(() => open.close());

  test("when a client that is not on loopback scrapes, then 403; a loopback client gets the metrics", async () => {
    const external = Object.values(os.networkInterfaces())
      .flat()
      .find((a) => a && a.family === "IPv4" && !a.internal)?.address;
    if (!external)
      throw new Error("this test needs a non-loopback IPv4 interface (none found in os.networkInterfaces())");
    const port = new URL(open.url).port;
    expectEnvelope(await call(`http://${external}:${port}`, "GET", "/metrics"), 403);
    const local = await fetch(`http://127.0.0.1:${port}/metrics`);
    expect(local.status).toBe(200);
    expect(await local.text()).toContain("switchyard_http_requests_total");
  });
});
