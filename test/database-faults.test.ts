/**
 * The standing database fault tests (issue 28, items 1 and 7): PostgreSQL frozen (SIGSTOP of its
 * postmaster and every backend) and stopped (fast shutdown) under a real Switchyard and real
 * traffic, on a PostgreSQL of this file's own (`support/pg-faults.ts`).
 *
 * These assert the fault figures, so, unlike the rest of the suite, they count requests
 * by how long they took, with bounds generous for a busy machine and still far below what the
 * faults did before the database circuit (requests hanging 5–43 s; 500s):
 * - frozen (9 s here, under 20 chat completions a second): no request waits more than 3 s (but
 *   the few whose charge was being committed as it froze: they wait for the thaw, see the test),
 *   every failure is a 503 with `Retry-After`, 2xx again within 10 s of the thaw, and the ledger
 *   charges exactly the requests answered 2xx;
 * - stopped: no 500 on any data-plane path, a control-plane read or GraphQL; 503 with
 *   `Retry-After` everywhere once the circuit is open; back once PostgreSQL is.
 */
import {
  CHAT_MODEL,
  EMBED_MODEL,
  type TestServer,
  createTestCaller,
  http,
  startTestServer,
} from "./support/harness.js";
import { type FaultyPostgres, startFaultyPostgres } from "./support/pg-faults.js";
import { queryPrepared } from "../src/db/sql.js";

let pg: FaultyPostgres;
let server: TestServer;
let caller: Awaited<ReturnType<typeof createTestCaller>>;

beforeAll(async () => {
  pg = await startFaultyPostgres();
  server = await startTestServer({}, pg.share());
  caller = await createTestCaller(server.url);
}, 120_000);

afterAll(async () => {
  pg?.thaw();
  await server?.close();
  await pg?.close();
}, 60_000);

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** One request of the traffic: when it was sent, how long it took, what it got. */
interface Shot {
  customId: string;
  sentAt: number;
  endedAt: number;
  status: number | "error";
  retryAfter: string | null;
}

/** A non-streamed chat completion tagged `customId` (its activity row's `custom_id`). */
async function chat(customId: string): Promise<Shot> {
  const sentAt = Date.now();
  try {
    const res = await fetch(`${server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${caller.key}`, "content-type": "application/json" },
      body: JSON.stringify({
        model: CHAT_MODEL,
        messages: [{ role: "user", content: "Once upon a time" }],
        max_tokens: 16,
        temperature: 0,
        metadata: { custom_id: customId },
      }),
      signal: AbortSignal.timeout(60_000),
    });
    await res.text();
    return { customId, sentAt, endedAt: Date.now(), status: res.status, retryAfter: res.headers.get("retry-after") };
  } catch {
    return { customId, sentAt, endedAt: Date.now(), status: "error", retryAfter: null };
  }
}

/**
 * Sends one chat completion every `everyMs` (on a fixed schedule) until `until()` says stop, calling
 * `onAnswer` with each answer as it comes; resolves with every answer.
 */
async function traffic(
  prefix: string,
  everyMs: number,
  until: () => boolean,
  onAnswer: (shot: Shot) => unknown,
): Promise<Shot[]> {
  const shots: Array<Promise<Shot>> = [];
  for (const start = Date.now(); !until(); await sleep(start + shots.length * everyMs - Date.now())) {
    shots.push(
      chat(`${prefix}-${shots.length}`).then((shot) => {
        onAnswer(shot);
        return shot;
      }),
    );
  }
  return Promise.all(shots);
}

describe("PostgreSQL frozen under traffic", () => {
  test("when PostgreSQL is frozen for 30 s under 20 chat completions a second, then no request waits on it over 3 s, every failure is a 503 with Retry-After, 2xx are back within 10 s of the thaw, and exactly the 2xx answers are charged", async () => {
    // The 30 s of issue 28's Checks.
    const FREEZE_MS = 30_000;
    let freezeAt = Infinity;
    let thawAt = Infinity;
    let answered = 0;
    const run = traffic(
      "freeze",
      50,
      () => Date.now() > thawAt + 12_000,
      (shot) => shot.status === 200 && answered++,
    );
    // Freeze once the traffic flows (20 answers: on a busy machine the first ones take longer).
    for (const deadline = Date.now() + 30_000; answered < 20 && Date.now() < deadline;) await sleep(50);
    pg.freeze();
    freezeAt = Date.now();
    await sleep(3_000);
    const probeSent = Date.now();
    const ready = await http(server.url, "GET", "/v1/health/ready");
    const readyWhileFrozen = { status: ready.status, ms: Date.now() - probeSent };
    const metricsWhileFrozen = (await http(server.url, "GET", "/metrics")).text;
    await sleep(freezeAt + FREEZE_MS - Date.now());
    pg.thaw();
    thawAt = Date.now();
    const shots = await run;

    // The traffic ran before, through and after the freeze.
    expect(shots.filter((s) => s.sentAt < freezeAt && s.status === 200).length).toBeGreaterThanOrEqual(20);
    const whileFrozen = shots.filter((s) => s.sentAt >= freezeAt + 2_000 && s.sentAt < thawAt);
    expect(whileFrozen.length).toBeGreaterThan(50);

    // No request waited on the frozen database more than 3 s (beyond what this machine takes to
    // answer right now, with the database healthy: the slowest answer before the freeze), but for
    // those whose charge PostgreSQL was committing when it froze (the COMMIT sent, its answer not
    // back): whether they were charged decides their answer, so they wait for the thaw and are
    // answered 2xx and charged (below); at most one group commit of them. Without the circuit,
    // requests wait out the whole freeze.
    const normal = Math.max(0, ...shots.filter((s) => s.endedAt < freezeAt).map((s) => s.endedAt - s.sentAt));
    const slow = shots.filter((s) => s.sentAt < thawAt && s.endedAt - s.sentAt > 3_000 + normal);
    const committing = slow.filter((s) => s.status === 200 && s.sentAt < freezeAt && s.endedAt >= thawAt);
    expect(committing.length).toBeLessThanOrEqual(20);
    expect(
      slow
        .filter((s) => !committing.includes(s))
        .map((s) => ({ id: s.customId, ms: s.endedAt - s.sentAt, status: s.status, normal })),
    ).toEqual([]);
    // From 2 s into the freeze, the circuit is open: requests are refused at once, well within the
    // Check's 3 s (2 s allowed here: on a loaded 2-core machine one of ~550 refusals took 1.7 s).
    expect(whileFrozen.filter((s) => s.endedAt - s.sentAt > 2_000 + normal)).toEqual([]);
    // Every failure is a 503 with Retry-After; while frozen, nothing succeeds (nothing can be charged).
    const failures = shots.filter((s) => s.status !== 200);
    expect(failures.filter((s) => s.status !== 503 || !s.retryAfter)).toEqual([]);
    expect(whileFrozen.filter((s) => s.status !== 503)).toEqual([]);
    // Readiness agrees with the circuit, and answers at once.
    expect(readyWhileFrozen).toEqual({ status: 503, ms: expect.any(Number) });
    expect(readyWhileFrozen.ms).toBeLessThan(3_000);
    expect(metricsWhileFrozen).toMatch(/^switchyard_database_available 0$/m);
    expect((await http(server.url, "GET", "/metrics")).text).toMatch(/^switchyard_database_available 1$/m);
    // 2xx again within 10 s of the thaw, and from then on only 2xx.
    const afterThaw = shots.filter((s) => s.sentAt >= thawAt);
    const firstOk = Math.min(...afterThaw.filter((s) => s.status === 200).map((s) => s.endedAt));
    expect(firstOk - thawAt).toBeLessThanOrEqual(10_000);
    expect(afterThaw.filter((s) => s.sentAt >= thawAt + 10_000 && s.status !== 200)).toEqual([]);

    // Exactly the requests answered 2xx are recorded completed, each charged its cost: none answered
    // without its charge, none charged while answered 503 (a flush cut off by the freeze was rolled
    // back, not committed when PostgreSQL ran again). A request that failed may have left the early
    // row of a request in flight (`pending`), never a charge.
    const recorded = await pg.query<{ custom_id: string; status: string; cost: string; charged: string | null }>(
      `SELECT a.custom_id, a.status, a.cost_micros::text AS cost, l.amount_micros::text AS charged
         FROM activity a LEFT JOIN credit_ledger l ON l.type = 'usage' AND l.source_id = a.id::text
        WHERE a.team_id = $1 AND a.custom_id LIKE 'freeze-%'`,
      [caller.teamId],
    );
    const completed = recorded.filter((r) => r.status === "completed");
    const ok = shots.filter((s) => s.status === 200).map((s) => s.customId);
    expect(completed.map((r) => r.custom_id).sort()).toEqual(ok.sort());
    expect(completed.filter((r) => -BigInt(r.charged ?? 0) !== BigInt(r.cost))).toEqual([]);
    expect(recorded.filter((r) => r.status !== "completed" && r.charged !== null)).toEqual([]);
    expect(completed.filter((r) => r.charged !== null).length).toBeGreaterThan(10);
    const [team] = await pg.query<{ balance: string; ledger: string }>(
      `SELECT t.credit_balance_micros::text AS balance,
              (SELECT sum(amount_micros) FROM credit_ledger WHERE team_id = t.id)::text AS ledger
         FROM teams t WHERE t.id = $1`,
      [caller.teamId],
    );
    expect(team.balance).toBe(team.ledger);
  }, 180_000);
});

describe("a statement cut off by a freeze", () => {
  test("when PostgreSQL freezes while a prepared statement runs (queryPrepared, as the group commit sends it), then the call fails with 503 and what the statement wrote is not committed when PostgreSQL runs again", async () => {
    await pg.query("CREATE TABLE IF NOT EXISTS fault_probe (id text PRIMARY KEY)");
    const id = `cut-${Date.now()}`;
    // Runs ~1.5 s on the server: the freeze lands inside it, before its answer and its commit.
    const call = queryPrepared<{ id: string }>(
      server.app.dataSource,
      "fault_probe",
      "WITH w AS (INSERT INTO fault_probe (id) VALUES ($1) RETURNING id) SELECT id, pg_sleep(1.5)::text FROM w",
      [id],
    ).then(
      () => "committed",
      (err: unknown) => (err as { status?: number }).status,
    );
    await sleep(300);
    pg.freeze();
    const outcome = await call;
    await sleep(500);
    pg.thaw();
    // The server finishes the statement once thawed, then finds its client gone: no commit.
    await sleep(2_500);
    expect(outcome).toBe(503);
    expect(await pg.query("SELECT id FROM fault_probe WHERE id = $1", [id])).toEqual([]);
    // And the same call commits once the circuit serves again.
    for (const deadline = Date.now() + 10_000; Date.now() < deadline; await sleep(200)) {
      if ((await http(server.url, "GET", "/v1/health/ready")).status === 200) break;
    }
    await expect(
      queryPrepared(server.app.dataSource, "fault_probe_ok", "INSERT INTO fault_probe (id) VALUES ($1) RETURNING id", [
        `${id}-ok`,
      ]),
    ).resolves.toEqual([{ id: `${id}-ok` }]);
  }, 60_000);
});

/** One request to every data-plane path, a control-plane read and a GraphQL query. */
function everyPath(): Array<Promise<{ path: string; status: number; retryAfter: string | null; body: any }>> {
  const key = caller.key;
  const say = [{ role: "user", content: "Once upon a time" }];
  const call = (label: string, method: string, path: string, body?: unknown, headers?: Record<string, string>) =>
    http(server.url, method, path, { token: key, body, headers }).then((res) => ({
      path: label,
      status: res.status,
      retryAfter: res.headers.get("retry-after"),
      body: res.body,
    }));
  return [
    call("chat", "POST", "/v1/chat/completions", { model: CHAT_MODEL, messages: say, max_tokens: 4 }),
    call("chat stream", "POST", "/v1/chat/completions", {
      model: CHAT_MODEL,
      messages: say,
      max_tokens: 4,
      stream: true,
    }),
    call("responses", "POST", "/v1/responses", { model: CHAT_MODEL, input: "Once upon a time", max_output_tokens: 4 }),
    call("responses get", "GET", "/v1/responses/0190d0a6-0000-7000-8000-000000000000"),
    call(
      "messages",
      "POST",
      "/v1/messages",
      { model: CHAT_MODEL, messages: say, max_tokens: 4 },
      { "anthropic-version": "2023-06-01" },
    ),
    call("embeddings", "POST", "/v1/embeddings", { model: EMBED_MODEL, input: "Once upon a time" }),
    call("batches", "POST", "/v1/batches", {
      requests: [{ custom_id: "a", body: { model: CHAT_MODEL, messages: say, max_tokens: 4 } }],
    }),
    call("batches list", "GET", "/v1/batches"),
    call("decisions", "POST", "/v1/decisions", {
      model: CHAT_MODEL,
      state: { story: "Once upon a time" },
      questions: { happy: { type: "yes_no", criteria: { true: "a happy story", false: "a sad story" } } },
    }),
    call("control read", "GET", "/control/v1/auth/api-keys"),
    call("graphql", "POST", "/graphql", { query: "{ apiKeys { items { id } } }" }),
  ];
}

describe("PostgreSQL stopped", () => {
  test("when PostgreSQL is stopped, then no path answers 500, every one answers 503 with Retry-After once the circuit is open, and they serve again once PostgreSQL is back", async () => {
    // Every path works first (the precondition: what follows is the outage, not a broken path).
    const before = await Promise.all(everyPath());
    expect(before.filter((r) => r.status >= 500)).toEqual([]);

    // Requests in flight while PostgreSQL shuts down, racing the circuit: no 500 (the database's
    // errors are 503s too).
    const stopping = pg.stop();
    const racing = await Promise.all([...everyPath(), ...(await sleep(20).then(() => everyPath()))]);
    await stopping;
    expect(racing.filter((r) => r.status === 500 || (r.status >= 500 && !r.retryAfter))).toEqual([]);
    // GraphQL answers its errors inside a 200: none of them is an internal error.
    for (const r of racing.filter((x) => x.path === "graphql" && x.status === 200)) {
      expect(r.body.errors.map((e: any) => e.extensions.status_code)).toEqual([503]);
    }
    // Once the circuit is open (readiness says so), every path answers 503 with Retry-After.
    expect((await http(server.url, "GET", "/v1/health/ready")).status).toBe(503);
    const stopped = await Promise.all(everyPath());
    expect(stopped.map((r) => [r.path, r.status, r.retryAfter])).toEqual(
      stopped.map((r) => [r.path, 503, expect.stringMatching(/^\d+$/)]),
    );
    expect((await http(server.url, "GET", "/v1/health")).status).toBe(200);

    await pg.start();
    let ready = 0;
    for (const deadline = Date.now() + 10_000; Date.now() < deadline && ready !== 200; await sleep(200)) {
      ready = (await http(server.url, "GET", "/v1/health/ready")).status;
    }
    expect(ready).toBe(200);
    const after = await Promise.all(everyPath());
    expect(after.filter((r) => r.status >= 500)).toEqual([]);
  }, 120_000);
});
