/**
 * Background responses at the edges of a process's life (issue 6, item 2; review findings): an
 * end whose abort NOTIFY never arrived is noticed by the runner's heartbeat, and a graceful stop
 * leaves a generation that outlives the job queue's wait in progress for another worker (as a
 * SIGKILL would) instead of ending it as failed.
 */
import { CHAT_MODEL, type TestServer, createTestCaller, eventually, http, startTestServer } from "./support/harness.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The next generation waits for `release()`, then spends `msPerToken` on each token. */
async function gatedSlowNextGeneration(msPerToken: number) {
  const lib = await import("node-llama-cpp");
  const proto = lib.LlamaCompletion.prototype as unknown as {
    generateCompletionWithMeta: (...a: any[]) => any;
  };
  const original = proto.generateCompletionWithMeta;
  let markStarted!: () => void;
  const started = new Promise<void>((r) => (markStarted = r));
  let markFirst!: () => void;
  const firstToken = new Promise<void>((r) => (markFirst = r));
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  proto.generateCompletionWithMeta = async function gatedSlowOnce(this: unknown, tokens: unknown, options: any) {
    proto.generateCompletionWithMeta = original;
    markStarted();
    await gate;
    const onToken = options.onToken as (t: unknown[]) => void;
    return original.call(this, tokens, {
      ...options,
      onToken: (t: unknown[]) => {
        onToken(t);
        markFirst();
        for (const until = Date.now() + msPerToken; Date.now() < until;);
      },
    });
  };
  return { started, firstToken, release };
}

function createBackground(server: TestServer, key: string, body: Record<string, unknown>) {
  return http(server.url, "POST", "/v1/responses", {
    token: key,
    body: { model: CHAT_MODEL, input: "Once upon a time", background: true, temperature: 0, ...body },
  });
}

test("when a running response is ended elsewhere and the abort NOTIFY never arrives, then its runner's heartbeat sees it and aborts", async () => {
  const server = await startTestServer();
  try {
    const caller = await createTestCaller(server.url);
    const gen = await gatedSlowNextGeneration(100);
    const res = await createBackground(server, caller.key, { max_output_tokens: 80 });
    await gen.started;
    gen.release();
    await gen.firstToken;
    // What `end` does in another process, without its NOTIFY (the listener was reconnecting).
    await server.db(
      `UPDATE responses SET status = 'cancelled', response_json = response_json || '{"status":"cancelled"}',
              completed_at = now(), updated_at = now() WHERE id = $1`,
      [res.body.id],
    );
    let rows: any[] = [];
    await eventually(
      async () =>
        (rows = await server.db(
          "SELECT status, completion_tokens FROM activity WHERE id = $1 AND status NOT IN ('pending', 'running')",
          [res.body.id],
        )).length > 0,
      30_000,
    );
    // Aborted part-way: 80 tokens at 100 ms each would take 8 s.
    expect(rows[0].status).toBe("cancelled");
    expect(rows[0].completion_tokens).toBeLessThan(80);
  } finally {
    await server.close();
  }
}, 60_000);

test("when a worker stops gracefully while a generation outlives the job queue's wait, then the response stays in progress for another worker", async () => {
  const server = await startTestServer();
  let closed = false;
  try {
    const caller = await createTestCaller(server.url);
    const gen = await gatedSlowNextGeneration(100);
    const res = await createBackground(server, caller.key, { max_output_tokens: 100 });
    await gen.started;
    const closing = server.app.close().finally(() => (closed = true));
    // The generation starts just before the job queue's 10 s wait ends, and is cut by the engines' close.
    await sleep(10_300);
    gen.release();
    await closing;
    // The generation cut by the engines' close ended after the job queue stopped: give pg-boss's
    // once-a-second watch over its stopping workers one more wake-up before this file ends.
    await sleep(1_200);
    const [row] = await server.db<any>("SELECT status, runner FROM responses WHERE id = $1", [res.body.id]);
    expect(row.status).toBe("in_progress");
    expect(row.runner).not.toBeNull();
    // No record of an end: its activity row is still the one from its create, in flight.
    expect(await server.db("SELECT status FROM activity WHERE id = $1", [res.body.id])).toEqual([
      { status: expect.stringMatching(/^(pending|running)$/) },
    ]);
  } finally {
    if (!closed) await server.app.close().catch(() => undefined);
    await server.close().catch(() => undefined);
  }
}, 90_000);
