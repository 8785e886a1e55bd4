/**
 * Review of issue 28, item 1 with issue 31, item 3 (session 15): "statement, lock and
 * idle-in-transaction timeouts on every pool". Behind a transaction-mode PgBouncer the pooled
 * DataSource can send no startup timeouts (PgBouncer refuses them), and the pool ran with none
 * unless the operator had set them on the role. Switchyard now sets them as its role's defaults in
 * its database through the direct URL at start (`src/db/pooled-timeouts.ts`) and checks them
 * through the pool.
 */
import { type TestServer, createTestDatabase, startTestServer } from "./support/harness.js";
import { type PgBouncer, requirePgBouncer, startPgBouncer } from "./support/pgbouncer.js";

let database: Awaited<ReturnType<typeof createTestDatabase>>;
let bouncer: PgBouncer | undefined;
let a: TestServer;

beforeAll(async () => {
  requirePgBouncer();
  database = await createTestDatabase();
  bouncer = await startPgBouncer(database.url);
  const shared = { databaseUrl: database.url, db: database.query } as TestServer;
  a = await startTestServer({ databaseUrl: bouncer.url, databaseDirectUrl: database.url }, shared);
}, 60_000);

afterAll(async () => {
  await a?.close();
  await bouncer?.stop();
  await database?.close();
});

test("when DATABASE_URL is PgBouncer, then the data-plane pool's sessions still carry the statement, lock and idle-in-transaction timeouts", async () => {
  const rows = (await a.app.dataSource.query(
    "SELECT current_setting('statement_timeout') AS st, current_setting('lock_timeout') AS lt, current_setting('idle_in_transaction_session_timeout') AS it",
  )) as Array<{ st: string; lt: string; it: string }>;
  expect(rows[0]).not.toMatchObject({ st: "0" });
  expect(rows[0]).not.toMatchObject({ lt: "0" });
  expect(rows[0]).not.toMatchObject({ it: "0" });
});
