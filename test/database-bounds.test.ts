/**
 * The database's bounds and their errors (issue 28, item 1), on the run's real PostgreSQL: every
 * session of a pool carries the configured statement, lock and idle-in-transaction timeouts;
 * migrations run without them; and what PostgreSQL, node-postgres and TypeORM raise when the
 * database is away or past a bound answers the database's 503 with `Retry-After` on REST and
 * GraphQL, while an error about the statement or its data does not.
 */
import { randomBytes } from "node:crypto";
import { GraphQLError } from "graphql";
import pg from "pg";
import type { DataSource } from "typeorm";
import { type SessionTimeouts, createDataSource, migrations, openDatabase } from "../src/db/data-source.js";
import { ensureDatabase, freePort } from "../src/db/embedded.js";
import { toEnvelope } from "../src/rest/error-envelope.js";
import { formatGraphqlError } from "../src/schema/error-formatter.js";
import { isDatabaseUnavailable } from "../src/shared/database-errors.js";
import { createTestDatabase } from "./support/harness.js";

const BOUNDS: SessionTimeouts = { statementTimeoutMs: 400, lockTimeoutMs: 150, idleInTransactionTimeoutMs: 500 };

let db: Awaited<ReturnType<typeof createTestDatabase>>;
let ds: DataSource;

beforeAll(async () => {
  db = await createTestDatabase();
  ds = createDataSource(db.url, { poolSize: 4, timeouts: BOUNDS });
  await ds.initialize();
});
afterAll(async () => {
  await ds?.destroy();
  await db?.close();
});

/** The error `run` rejects with. */
async function failure(run: () => Promise<unknown>): Promise<unknown> {
  try {
    await run();
  } catch (err) {
    return err;
  }
  throw new Error("expected a failure");
}

/** Asserts `err` answers the database's 503 with Retry-After on REST and GraphQL. */
function expectDatabase503(err: unknown): void {
  expect(isDatabaseUnavailable(err)).toBe(true);
  const rest = toEnvelope(err);
  expect(rest.status).toBe(503);
  expect(rest.retryAfterS).toBeGreaterThan(0);
  expect(rest.body).toEqual(
    expect.objectContaining({ status_code: 503, error: expect.objectContaining({ code: "database_unavailable" }) }),
  );
  // As a resolver's error reaches the formatter: wrapped, with its path.
  const wrapped = new GraphQLError("x", { originalError: err as Error, path: ["apiKeys"] });
  const gql = formatGraphqlError({ message: "x" }, wrapped);
  expect(gql.extensions).toEqual({ code: "DATABASE_UNAVAILABLE", status_code: 503, extra: null });
}

describe("session bounds", () => {
  test("when a pool connection is opened, then it carries the configured statement, lock and idle-in-transaction timeouts", async () => {
    const rows = await ds.query(
      `SELECT current_setting('statement_timeout') AS statement, current_setting('lock_timeout') AS lock,
              current_setting('idle_in_transaction_session_timeout') AS idle`,
    );
    expect(rows).toEqual([{ statement: "400ms", lock: "150ms", idle: "500ms" }]);
  });

  test("when a statement runs past the statement timeout, then it is cancelled and answers 503", async () => {
    const err = await failure(() => ds.query("SELECT pg_sleep(5)"));
    expect((err as { code?: string }).code).toBe("57014");
    expectDatabase503(err);
  });

  test("when a lock is waited for past the lock timeout, then the wait fails and answers 503", async () => {
    const holder = ds.createQueryRunner();
    await holder.connect();
    try {
      await holder.query("SELECT pg_advisory_lock(7240699)");
      const err = await failure(() => ds.query("SELECT pg_advisory_lock(7240699)"));
      expect((err as { code?: string }).code).toBe("55P03");
      expectDatabase503(err);
    } finally {
      await holder.query("SELECT pg_advisory_unlock(7240699)");
      await holder.release();
    }
  });

  test("when a transaction sits idle past the idle-in-transaction timeout, then PostgreSQL closes its session and the next statement answers 503", async () => {
    const pool = (ds.driver as unknown as { master: pg.Pool }).master;
    const client = await pool.connect();
    const closed = new Promise<unknown>((resolve) => client.once("error", resolve));
    let broken: Error | undefined;
    try {
      await client.query("BEGIN");
      expect((await closed) as { code?: string }).toEqual(expect.objectContaining({ code: "25P03" }));
      broken = (await failure(() => client.query("SELECT 1"))) as Error;
      expectDatabase503(broken);
    } finally {
      client.release(broken ?? new Error("test"));
    }
    // The pool dropped the closed connection: the next query works.
    expect(await ds.query("SELECT 1 AS one")).toEqual([{ one: 1 }]);
  });

  test("when the migrations wait for another process's migrations and run, then the pool's statement and lock timeouts do not bound them, and the pool keeps its own", async () => {
    const adminUrl = process.env.SWITCHYARD_TEST_ADMIN_URL!;
    const name = `t_${randomBytes(6).toString("hex")}`;
    await ensureDatabase(adminUrl, name);
    const url = new URL(adminUrl);
    url.pathname = `/${name}`;
    // Another process migrating: it holds the migration lock (data-source.ts) for 1 s.
    const other = new pg.Client({ connectionString: url.toString() });
    await other.connect();
    await other.query("SELECT pg_advisory_lock(7240611)");
    const tight = { statementTimeoutMs: 50, lockTimeoutMs: 50, idleInTransactionTimeoutMs: 60_000 };
    const opening = openDatabase(url.toString(), { poolSize: 2, timeouts: tight });
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    await other.query("SELECT pg_advisory_unlock(7240611)");
    const migrated = await opening;
    try {
      const [{ n }] = (await other.query("SELECT count(*)::int AS n FROM migrations")).rows;
      expect(n).toBe(migrations.length);
      const [{ statement }] = await migrated.query("SELECT current_setting('statement_timeout') AS statement");
      expect(statement).toBe("50ms");
    } finally {
      await other.end();
      await migrated.destroy();
      const cluster = new pg.Client({ connectionString: adminUrl });
      await cluster.connect();
      await cluster.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await cluster.end();
    }
  }, 60_000);
});

describe("errors of an unavailable database", () => {
  test("when PostgreSQL refuses the connection, then the error answers 503 with Retry-After", async () => {
    const port = await freePort();
    const closed = createDataSource(`postgres://postgres:postgres@127.0.0.1:${port}/none`, { poolSize: 1 });
    const err = await failure(() => closed.initialize());
    expect((err as { code?: string }).code).toBe("ECONNREFUSED");
    expectDatabase503(err);
  });

  test("when a statement or its data is wrong, then it is not taken for an unavailable database", async () => {
    const syntax = await failure(() => ds.query("SELEC 1"));
    const type = await failure(() => ds.query("SELECT 'x'::uuid"));
    for (const err of [syntax, type]) {
      expect(isDatabaseUnavailable(err)).toBe(false);
      expect(toEnvelope(err).status).toBe(500);
    }
  });
});
