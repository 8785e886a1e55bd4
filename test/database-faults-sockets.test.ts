/**
 * The database circuit over graphql-ws (issue 28, item 1: "503 + Retry-After … on every path";
 * review of issue 28): while PostgreSQL is away, a subscription is refused with the database's 503
 * like every HTTP operation, never an internal error, and a socket that connects with a valid
 * credential is told to try again later (close code 1013, which graphql-ws clients retry), not
 * that its credential is forbidden (4403). On a PostgreSQL of this file's own
 * (`support/pg-faults.ts`), frozen (SIGSTOP) and thawed; the credential cache keeps a key used
 * before the freeze (its lifetime is a minute), so that socket's subscription is what needs the
 * database.
 */
import { type Client, createClient } from "graphql-ws";
import WebSocket from "ws";
import { createTestApiKey, createTestCaller, http, type TestServer, startTestServer } from "./support/harness.js";
import { type FaultyPostgres, startFaultyPostgres } from "./support/pg-faults.js";

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

/** What became of one `completionEvents` subscription on a socket of its own. */
interface Subscribed {
  /** The server acknowledged the connection. */
  connected: boolean;
  /** The close code, when the socket was closed. */
  closeCode?: number;
  /** The `error` message's errors, when the subscription was refused. */
  errors?: Array<{ message: string; extensions?: Record<string, unknown> }>;
}

/** Subscribes with `credential` and reports what happened within `quietMs` (no retries). */
async function subscribe(credential: string, quietMs = 1_500): Promise<Subscribed> {
  const out: Subscribed = { connected: false };
  let client: Client | undefined;
  await new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, quietMs);
    const finish = () => {
      clearTimeout(timer);
      resolve();
    };
    client = createClient({
      url: `${server.url.replace(/^http/, "ws")}/graphql`,
      webSocketImpl: WebSocket,
      retryAttempts: 0,
      connectionParams: { authorization: `Bearer ${credential}` },
      on: {
        connected: () => (out.connected = true),
        closed: (event) => {
          out.closeCode ??= (event as { code: number }).code;
          finish();
        },
      },
    });
    client.subscribe(
      { query: "subscription { completionEvents { responseId } }" },
      {
        next: () => undefined,
        error: (err) => {
          if (Array.isArray(err)) out.errors = err as Subscribed["errors"];
          finish();
        },
        complete: finish,
      },
    );
  });
  await client?.dispose();
  return out;
}

/** Polls readiness until it answers `status` (at most 15 s). */
async function readyIs(status: number): Promise<number> {
  let seen = 0;
  for (const deadline = Date.now() + 15_000; Date.now() < deadline && seen !== status; await sleep(200)) {
    seen = (await http(server.url, "GET", "/v1/health/ready")).status;
  }
  return seen;
}

test("when PostgreSQL is frozen, then a graphql-ws subscription gets the database's 503 (not an internal error) and a connecting socket is told to try again later (1013, not 4403), and both work once it is back", async () => {
  // A key of the caller never used before the outage: its lookup needs the database.
  const unused = await createTestApiKey(server.url, caller.token, "unused before the outage");
  // Precondition: subscriptions work, with a key the server has seen.
  const before = await subscribe(caller.key);
  expect(before).toEqual({ connected: true });

  pg.freeze();
  expect(await readyIs(503)).toBe(503);

  // A socket whose key is known: the subscription itself needs the database.
  const known = await subscribe(caller.key);
  expect(known.errors?.map((e) => [e.message, e.extensions?.status_code, e.extensions?.code])).toEqual([
    ["The database is unavailable; retry later", 503, "DATABASE_UNAVAILABLE"],
  ]);
  // A socket whose key must be looked up: not refused as forbidden, told to come back.
  const unknown = await subscribe(unused.key);
  expect(unknown).toEqual({ connected: false, closeCode: 1013 });

  pg.thaw();
  expect(await readyIs(200)).toBe(200);
  expect(await subscribe(unused.key)).toEqual({ connected: true });
  expect(await subscribe(caller.key)).toEqual({ connected: true });
}, 120_000);

test("when PostgreSQL stops and starts again under an open subscription, then it ends with the database's 503 at most, and the socket is not closed as forbidden", async () => {
  let closeCode: number | undefined;
  let failed: Subscribed["errors"] | undefined;
  let connected = false;
  const client = createClient({
    url: `${server.url.replace(/^http/, "ws")}/graphql`,
    webSocketImpl: WebSocket,
    retryAttempts: 0,
    lazy: false,
    connectionParams: { authorization: `Bearer ${caller.key}` },
    on: {
      connected: () => (connected = true),
      closed: (event) => (closeCode ??= (event as { code: number }).code),
    },
  });
  client.subscribe(
    { query: "subscription { completionEvents { responseId } }" },
    { next: () => undefined, error: (err) => (failed = err as Subscribed["errors"]), complete: () => undefined },
  );
  for (const deadline = Date.now() + 10_000; !connected && Date.now() < deadline;) await sleep(50);
  expect(connected).toBe(true);

  await pg.stop();
  expect(await readyIs(503)).toBe(503);
  await pg.start();
  expect(await readyIs(200)).toBe(200);
  // The cache listener reconnects with a backoff of 1 s, then 2 s, and then every socket's
  // credential is checked again: give it time to.
  await sleep(4_000);
  expect(closeCode).toBeUndefined();
  expect((failed ?? []).filter((e) => e.extensions?.status_code !== 503)).toEqual([]);
  await client.dispose();
}, 120_000);
