/**
 * Engine capacity and cancellation through real HTTP: a full engine answers 429 with Retry-After
 * (no charge), and a client that goes away mid-stream stops the generation, which is recorded as
 * cancelled with the tokens it used.
 */
import {
  CHAT_MODEL,
  type TestServer,
  activityByCustomId,
  createTestCaller,
  expectEnvelope,
  http,
  startTestServer,
} from "./support/harness.js";

let server: TestServer;
let caller: Awaited<ReturnType<typeof createTestCaller>>;

beforeAll(async () => {
  // One sequence and a one-second queue: a burst of long generations must overflow it.
  server = await startTestServer({ engineSequences: 1, maxQueueWaitS: 1 });
  caller = await createTestCaller(server.url);
});
afterAll(() => server.close());

const long = { model: CHAT_MODEL, messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 480 };

test("when more requests arrive than the engine serves within the queue wait, then the rest get 429 with Retry-After and no charge", async () => {
  const results = await Promise.all(
    Array.from({ length: 60 }, () =>
      http(server.url, "POST", "/v1/chat/completions", { token: caller.key, body: long }),
    ),
  );
  const ok = results.filter((r) => r.status === 200);
  const limited = results.filter((r) => r.status === 429);
  expect(ok.length + limited.length).toBe(60);
  expect(ok.length).toBeGreaterThan(0);
  expect(limited.length).toBeGreaterThan(0);
  for (const r of limited) {
    expectEnvelope(r, 429);
    expect(r.headers.get("retry-after")).toBe("1");
  }
  const [activity] = await server.db<any>("SELECT count(*)::int AS n FROM activity WHERE team_id = $1", [
    caller.teamId,
  ]);
  expect(activity.n).toBe(ok.length);
});

test("when the client goes away mid-stream, then generation stops and the request is recorded as cancelled", async () => {
  const controller = new AbortController();
  const res = await fetch(`${server.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${caller.key}`, "content-type": "application/json" },
    body: JSON.stringify({ ...long, stream: true, metadata: { custom_id: "walk-away" } }),
    signal: controller.signal,
  });
  expect(res.status).toBe(200);
  const reader = res.body!.getReader();
  await reader.read();
  controller.abort();
  const row = await activityByCustomId(server, "walk-away");
  expect(row).toBeDefined();
  expect(row.status).toBe("cancelled");
  expect(row.completion_tokens).toBeLessThan(480);
});

test("when the client goes away while its request waits for the engine, then it is recorded as cancelled, not failed", async () => {
  const busy = Array.from({ length: 3 }, () =>
    http(server.url, "POST", "/v1/chat/completions", { token: caller.key, body: long }),
  );
  const controller = new AbortController();
  const waiting = fetch(`${server.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${caller.key}`, "content-type": "application/json" },
    body: JSON.stringify({ ...long, metadata: { custom_id: "left-the-queue" } }),
    signal: controller.signal,
  }).catch(() => undefined);
  await new Promise((r) => setTimeout(r, 30));
  controller.abort();
  await waiting;
  await Promise.all(busy);
  const row = await activityByCustomId(server, "left-the-queue");
  expect(row).toMatchObject({ status: "cancelled", cost_micros: "0" });
  expect(row.error_json.code).toBe("client_closed");
});
