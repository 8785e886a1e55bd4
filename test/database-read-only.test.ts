/**
 * A PostgreSQL that turned read-only under the service (review of issue 28, item 1: "503 +
 * Retry-After … on every path", never 500): what a failover leaves behind while the service still
 * reaches the old primary, now a standby, or a database put in read-only mode for maintenance.
 * Every write fails with SQLSTATE 25006 (read_only_sql_transaction). On a PostgreSQL of this file's
 * own (`support/pg-faults.ts`): `default_transaction_read_only` set for the whole cluster and
 * reloaded, so the pool's open connections turn read-only too.
 */
import { CHAT_MODEL, type TestServer, createTestCaller, http, startTestServer } from "./support/harness.js";
import { type FaultyPostgres, startFaultyPostgres } from "./support/pg-faults.js";

let pg: FaultyPostgres;
let server: TestServer;

beforeAll(async () => {
  pg = await startFaultyPostgres();
  server = await startTestServer({}, pg.share());
}, 120_000);

afterAll(async () => {
  await server?.close();
  await pg?.close();
}, 60_000);

async function readOnly(on: boolean): Promise<void> {
  await pg.query(`ALTER SYSTEM SET default_transaction_read_only = ${on ? "on" : "off"}`);
  await pg.query("SELECT pg_reload_conf()");
}

test("when the database turns read-only, then writes answer 503 with Retry-After (not 500), reads still answer, and writes work again once it is writable", async () => {
  const caller = await createTestCaller(server.url);
  const chat = { model: CHAT_MODEL, messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 4 };
  const writes = () =>
    Promise.all([
      http(server.url, "POST", "/v1/chat/completions", { token: caller.key, body: chat }),
      http(server.url, "POST", "/control/v1/auth/api-keys", { token: caller.token, body: { name: "ro" } }),
      http(server.url, "POST", "/graphql", {
        token: caller.token,
        body: { query: 'mutation { createApiKey(input: { name: "ro" }) { id } }' },
      }),
    ]);
  expect((await writes()).map((r) => r.status)).toEqual([200, 201, 200]);

  await readOnly(true);
  try {
    // The reload reaches every session at its next statement.
    await new Promise((r) => setTimeout(r, 500));
    const [chatRes, keyRes, gql] = await writes();
    expect([chatRes.status, chatRes.headers.get("retry-after") !== null]).toEqual([503, true]);
    expect([keyRes.status, keyRes.headers.get("retry-after") !== null]).toEqual([503, true]);
    expect(gql.body.errors.map((e: any) => e.extensions.status_code)).toEqual([503]);
    // Reads need no write.
    expect((await http(server.url, "GET", "/control/v1/auth/api-keys", { token: caller.token })).status).toBe(200);
  } finally {
    await readOnly(false);
  }
  await new Promise((r) => setTimeout(r, 500));
  expect((await writes()).map((r) => r.status)).toEqual([200, 201, 200]);
}, 120_000);
