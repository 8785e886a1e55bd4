/**
 * Engine capacity comes back (issue 14, item 2). With one sequence, a sequence that is not given
 * back after a request ends makes every later request wait and then get 429. After a client leaves
 * mid-stream, after a client leaves while queued, and after an engine failure, the pool's free
 * count returns to its size and the next request is served (200).
 *
 * Engine failures and a busy engine are produced at the node-llama-cpp boundary
 * (`support/engine-faults.ts`): the library's completion call rejects, or is held until the test
 * lets it run. Everything of ours (engine, slot pool, inference service, metering, HTTP) is real.
 */
import { chatSlots, failNextGeneration, holdNextGeneration } from "./support/engine-faults.js";
import {
  CHAT_MODEL,
  type TestServer,
  activityByCustomId,
  createTestCaller,
  eventually,
  expectEnvelope,
  http,
  startTestServer,
} from "./support/harness.js";

let server: TestServer;
let caller: Awaited<ReturnType<typeof createTestCaller>>;

beforeAll(async () => {
  // One sequence, and a short default queue wait: a lost sequence shows as 429 within seconds.
  server = await startTestServer({ engineSequences: 1, maxQueueWaitS: 2 });
  caller = await createTestCaller(server.url);
});
afterAll(() => server.close());

const long = (customId: string) => ({
  model: CHAT_MODEL,
  messages: [{ role: "user", content: "Once upon a time" }],
  max_tokens: 480,
  metadata: { custom_id: customId },
});

function post(body: unknown, signal?: AbortSignal): Promise<Response> {
  return fetch(`${server.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${caller.key}`, "content-type": "application/json" },
    body: JSON.stringify(body),
    signal,
  });
}

/** The pool is whole again: every sequence free, nobody waiting. */
async function expectPoolWhole(): Promise<void> {
  const whole = await eventually(async () => {
    const s = await chatSlots(server);
    return s.available === s.size && s.waiting === 0;
  }, 5_000);
  expect(await chatSlots(server)).toEqual({ size: 1, available: 1, waiting: 0 });
  expect(whole).toBe(true);
}

/** The next request gets the (only) sequence: 200 and a completed activity row. */
async function expectNextRequestServed(customId: string): Promise<void> {
  const res = await http(server.url, "POST", "/v1/chat/completions", {
    token: caller.key,
    body: { ...long(customId), max_tokens: 4, temperature: 0 },
  });
  expect(res.status).toBe(200);
  expect(res.body.usage.completion_tokens).toBeGreaterThan(0);
  expect((await activityByCustomId(server, customId)).status).toBe("completed");
  await expectPoolWhole();
}

test("when nothing has run, then the pool has its one sequence free", async () => {
  expect(await chatSlots(server)).toEqual({ size: 1, available: 1, waiting: 0 });
});

test("when the client leaves mid-stream, then the sequence comes back and the next request gets 200", async () => {
  const controller = new AbortController();
  const res = await post({ ...long("mid-stream"), stream: true }, controller.signal);
  expect(res.status).toBe(200);
  const reader = res.body!.getReader();
  // The stream opens once the engine holds the sequence; wait for generated text, then leave.
  const decoder = new TextDecoder();
  let seen = "";
  while (!/"content":"[^"]/.test(seen)) {
    const { value, done } = await reader.read();
    if (done) break;
    seen += decoder.decode(value);
  }
  controller.abort();
  const row = await activityByCustomId(server, "mid-stream");
  expect(row).toMatchObject({ status: "cancelled" });
  expect(row.completion_tokens).toBeGreaterThan(0);
  expect(row.completion_tokens).toBeLessThan(480);
  await expectPoolWhole();
  await expectNextRequestServed("after-mid-stream");
});

test("when the client leaves while queued, then the sequence still comes back and the next request gets 200", async () => {
  const busy = await holdNextGeneration();
  const running = post(long("holder"));
  try {
    await busy.started;
    expect(await chatSlots(server)).toEqual({ size: 1, available: 0, waiting: 0 });

    const controller = new AbortController();
    // A queue wait well past the default, so the request leaves the queue only by its client's abort.
    const waiting = post({ ...long("left-the-queue"), max_queue_wait_s: 60 }, controller.signal).catch(
      (err: unknown) => err,
    );
    expect(await eventually(async () => (await chatSlots(server)).waiting === 1, 5_000)).toBe(true);
    controller.abort();
    expect(await waiting).toMatchObject({ name: "AbortError" });
    const left = await activityByCustomId(server, "left-the-queue");
    expect(left).toMatchObject({ status: "cancelled", completion_tokens: 0, cost_micros: "0" });
    expect(left.error_json.code).toBe("client_closed");
    expect(await chatSlots(server)).toEqual({ size: 1, available: 0, waiting: 0 });
  } finally {
    busy.release();
  }
  expect((await running).status).toBe(200);
  expect((await activityByCustomId(server, "holder")).status).toBe("completed");
  await expectPoolWhole();
  await expectNextRequestServed("after-queue");
});

test("when the engine fails a request, then the sequence comes back and the next request gets 200", async () => {
  await failNextGeneration();
  const failed = await http(server.url, "POST", "/v1/chat/completions", {
    token: caller.key,
    body: long("engine-failure"),
  });
  expectEnvelope(failed, 502);
  const row = await activityByCustomId(server, "engine-failure");
  expect(row).toMatchObject({ status: "failed", cost_micros: "0" });
  expect(row.error_json.code).toBe("engine_failure");
  await expectPoolWhole();
  await expectNextRequestServed("after-engine-failure");
});

test("when the engine fails a streamed request, then the stream ends with an error and the next request gets 200", async () => {
  await failNextGeneration();
  const res = await post({ ...long("stream-failure"), stream: true });
  expect(res.status).toBe(200);
  const text = await res.text();
  expect(text).toContain(`"code":"engine_failure"`);
  expect((await activityByCustomId(server, "stream-failure")).status).toBe("failed");
  await expectPoolWhole();
  await expectNextRequestServed("after-stream-failure");
});
