/**
 * PgBouncer in transaction mode (issue 31, item 3), against a real PgBouncer this file starts
 * (Debian's `pgbouncer`, 1.18 here: no protocol-level prepared statements): two Switchyard
 * processes whose `DATABASE_URL` is the pooler and `DATABASE_DIRECT_URL` PostgreSQL itself serve
 * chat, streaming, a background response (pg-boss), an events long-poll woken from the other
 * process (LISTEN) and credit exact across both; and each rule of the pooler broken on purpose
 * fails: a session advisory lock or a LISTEN through it is refused at start, a named prepared
 * statement through it errors.
 *
 * PgBouncer: `SWITCHYARD_PGBOUNCER`, else `/usr/sbin/pgbouncer` (`.ci/run` installs it when missing;
 * test/support/pgbouncer.ts starts it).
 */
import pg from "pg";
import pino from "pino";
import { createDataSource, openDatabase } from "../src/db/data-source.js";
import { NoSessionError, assertSession } from "../src/db/session.js";
import { queryPrepared, useUnnamedStatements } from "../src/db/sql.js";
import { CacheBus } from "../src/services/platform/cache-bus.js";
import {
  CHAT_MODEL,
  type TestServer,
  createTestCaller,
  createTestDatabase,
  eventually,
  expectEnvelope,
  http,
  openaiClient,
  startTestServer,
} from "./support/harness.js";
import { type PgBouncer, requirePgBouncer, startPgBouncer } from "./support/pgbouncer.js";
import { writeTestCatalog } from "./support/test-catalog.js";

let database: Awaited<ReturnType<typeof createTestDatabase>>;
let bouncer: PgBouncer | undefined;
let a: TestServer;
let b: TestServer;

beforeAll(async () => {
  requirePgBouncer();
  database = await createTestDatabase();
  bouncer = await startPgBouncer(database.url);
  const shared = { databaseUrl: database.url, db: database.query } as TestServer;
  const catalogPath = writeTestCatalog(CHAT_MODEL, { input: "1", cachedInput: "0.5", output: "10" });
  const settings = { databaseUrl: bouncer.url, databaseDirectUrl: database.url, catalogPath, engineSequences: 4 };
  a = await startTestServer(settings, shared);
  b = await startTestServer(settings, shared);
}, 60_000);

afterAll(async () => {
  await b?.close();
  await a?.close();
  await bouncer?.stop();
  await database?.close();
});

const chat = (maxTokens = 8) => ({
  model: CHAT_MODEL,
  messages: [{ role: "user" as const, content: "Once upon a time" }],
  temperature: 0,
  max_tokens: maxTokens,
});

test("when DATABASE_URL is PgBouncer in transaction mode, then chat and streaming are answered and charged", async () => {
  const caller = await createTestCaller(a.url);
  const client = openaiClient(a.url, caller.key);
  const answer = await client.chat.completions.create(chat());
  expect(answer.choices[0].message.content?.length).toBeGreaterThan(0);
  let text = "";
  for await (const chunk of await client.chat.completions.create({ ...chat(), stream: true })) {
    text += chunk.choices[0]?.delta?.content ?? "";
  }
  expect(text.length).toBeGreaterThan(0);
  await a.app.metering.drainAll();
  const charges = await database.query<{ n: string }>(
    "SELECT count(*) AS n FROM credit_ledger WHERE type = 'usage' AND team_id = $1",
    [caller.teamId],
  );
  expect(Number(charges[0].n)).toBe(2);
}, 30_000);

test("when a background response is created through the pooler, then pg-boss runs it to its end", async () => {
  const caller = await createTestCaller(a.url);
  const res = await http(a.url, "POST", "/v1/responses", {
    token: caller.key,
    body: { model: CHAT_MODEL, input: "Once upon a time", background: true, max_output_tokens: 8 },
  });
  expect(res.status).toBe(200);
  // Ended by the worker: `incomplete` when it stopped at max_output_tokens, `completed` otherwise.
  let status: unknown;
  await eventually(async () => {
    status = (await http(b.url, "GET", `/v1/responses/${res.body.id}`, { token: caller.key })).body.status;
    return status === "completed" || status === "incomplete";
  }, 20_000);
  expect(["completed", "incomplete"]).toContain(status);
  // pg-boss (on DATABASE_DIRECT_URL) marks its job done once the handler returns.
  const jobDone = async () =>
    (
      await database.query<{ state: string }>(
        "SELECT state FROM pgboss.job WHERE name = 'response-generate' AND data->>'responseId' = $1",
        [res.body.id],
      )
    )[0]?.state === "completed";
  expect(await eventually(jobDone, 10_000)).toBe(true);
}, 30_000);

test("when a long-poll waits on one process and the other records an event, then LISTEN on the direct URL wakes it", async () => {
  const caller = await createTestCaller(a.url);
  const waitingBefore = a.app.events.waiting;
  const pending = http(a.url, "GET", "/v1/responses/events?wait_ms=25000", { token: caller.key });
  expect(await eventually(async () => a.app.events.waiting > waitingBefore, 5_000)).toBe(true);
  const done = await http(b.url, "POST", "/v1/chat/completions", { token: caller.key, body: chat() });
  expect(done.status).toBe(200);
  const page = await pending;
  expect(page.status).toBe(200);
  expect(page.body.data.map((e: any) => `chatcmpl-${e.response_id}`)).toEqual([done.body.id]);
}, 40_000);

test("when two processes behind the pooler spend one balance, then every answer is charged once and the balance never goes below zero", async () => {
  const caller = await createTestCaller(a.url);
  // About twenty worst-case requests: 6 prompt tokens × 1 µUSD + 8 completion tokens × 10 µUSD.
  const grant = 20 * 86;
  await database.query(
    `INSERT INTO credit_ledger (id, team_id, type, amount_micros, balance_after_micros, source_id)
     SELECT gen_random_uuid(), id, 'adjustment', $2::bigint - credit_balance_micros, $2::bigint, gen_random_uuid()::text
       FROM teams WHERE id = $1`,
    [caller.teamId, grant],
  );
  await database.query("UPDATE teams SET credit_balance_micros = $2::bigint WHERE id = $1", [caller.teamId, grant]);
  const answers = await Promise.all(
    Array.from({ length: 60 }, (_, i) =>
      http(i % 2 === 0 ? a.url : b.url, "POST", "/v1/chat/completions", { token: caller.key, body: chat() }),
    ),
  );
  const ok = answers.filter((r) => r.status === 200);
  expect(ok.length).toBeGreaterThanOrEqual(1);
  for (const r of answers.filter((x) => x.status !== 200)) expectEnvelope(r, 402);
  await a.app.metering.drainAll();
  await b.app.metering.drainAll();
  const [team] = await database.query<{ balance: string; charged: string; n: string }>(
    `SELECT t.credit_balance_micros AS balance,
            (SELECT coalesce(-sum(amount_micros), 0) FROM credit_ledger WHERE team_id = t.id AND type = 'usage') AS charged,
            (SELECT count(*) FROM credit_ledger WHERE team_id = t.id AND type = 'usage') AS n
       FROM teams t WHERE t.id = $1`,
    [caller.teamId],
  );
  expect(Number(team.n)).toBe(ok.length);
  expect(Number(team.balance)).toBeGreaterThanOrEqual(0);
  expect(Number(team.balance) + Number(team.charged)).toBe(grant);
}, 60_000);

describe("each rule of a transaction-mode pooler, broken on purpose", () => {
  test("when the session probe runs against PgBouncer, then it is refused, and PostgreSQL itself passes", async () => {
    await expect(assertSession(bouncer!.url, "a test")).rejects.toBeInstanceOf(NoSessionError);
    await expect(assertSession(database.url, "a test")).resolves.toBeUndefined();
  });

  test("when DATABASE_DIRECT_URL points at the pooler, then the migrations' session advisory lock refuses to start", async () => {
    const err = await openDatabase(bouncer!.url, { poolSize: 2, directUrl: bouncer!.url }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NoSessionError);
    expect(String(err)).toMatch(/advisory lock.*DATABASE_DIRECT_URL/s);
    // And a whole Switchyard does not start on it.
    const shared = { databaseUrl: database.url, db: database.query } as TestServer;
    await expect(
      startTestServer({ databaseUrl: bouncer!.url, databaseDirectUrl: bouncer!.url }, shared),
    ).rejects.toBeInstanceOf(NoSessionError);
  }, 30_000);

  test("when the cache bus would LISTEN through the pooler, then it refuses to start", async () => {
    const bus = new CacheBus(bouncer!.url, pino({ level: "silent" }));
    await expect(bus.start()).rejects.toBeInstanceOf(NoSessionError);
    await bus.close();
  });

  test("when a named prepared statement goes through the pooler, then it fails, and the pooled pool's unnamed one works", async () => {
    // A second server connection is made busy (an open transaction) between the two calls, so the
    // second call lands on a server connection that never saw the statement prepared.
    const run = async (unnamed: boolean): Promise<unknown> => {
      // As the pooled pool is made (openPooled): no session bounds as startup parameters.
      const ds = createDataSource(bouncer!.url, { poolSize: 1, startupTimeouts: false });
      await ds.initialize();
      if (unnamed) useUnnamedStatements(ds);
      const holder = new pg.Client({ connectionString: bouncer!.url });
      try {
        const text = `SELECT $1::int + ${unnamed ? 1 : 2} AS n`;
        await queryPrepared(ds, "pgbouncer_probe", text, [1]);
        await holder.connect();
        await holder.query("BEGIN");
        await holder.query("SELECT 1");
        return await queryPrepared(ds, "pgbouncer_probe", text, [1]);
      } catch (err) {
        return err;
      } finally {
        await holder.query("COMMIT").catch(() => undefined);
        await holder.end().catch(() => undefined);
        await ds.destroy();
      }
    };
    expect(String(await run(false))).toMatch(/prepared statement .* does not exist/);
    expect(await run(true)).toEqual([{ n: 2 }]);
  }, 30_000);
});
