/**
 * The database circuit over a far database (review of issue 28, item 1: "closes again within 10 s
 * of recovery"). A PostgreSQL of this file's own (`support/pg-faults.ts`) behind a loopback TCP
 * proxy that can hold every chunk for a while in each direction, as a database in another region
 * does. While the circuit is open it probes with a connection of its own, made afresh each time;
 * a new connection to a far database (startup, password exchange, then `SELECT 1`) takes several
 * round trips. When those take longer than the probe's bound (`SWITCHYARD_DB_PROBE_TIMEOUT_MS`,
 * 1 s), no probe ever succeeds: after one outage the circuit stays open, and every request is
 * answered 503, against a database that answers every query. This proxy adds no TLS and the
 * password exchange is short here: a managed PostgreSQL (TLS, SCRAM) takes twice the round trips,
 * so half this distance does the same there.
 */
import net from "node:net";
import pg from "pg";
import { type TestServer, createTestCaller, http, startTestServer } from "./support/harness.js";
import { type FaultyPostgres, startFaultyPostgres } from "./support/pg-faults.js";

/** A TCP proxy to `port` that holds each chunk `delay.ms` in each direction. */
async function startLatencyProxy(
  port: number,
): Promise<{ port: number; delay: { ms: number }; close(): Promise<void> }> {
  const delay = { ms: 0 };
  const sockets = new Set<net.Socket>();
  let closing = false;
  const relay = (from: net.Socket, to: net.Socket) => {
    from.on("data", (chunk) => {
      const write = () => {
        if (!to.destroyed) to.write(chunk);
      };
      if (delay.ms === 0) write();
      else setTimeout(write, delay.ms);
    });
    from.on("close", () => setTimeout(() => to.destroy(), delay.ms));
    from.on("error", () => to.destroy());
  };
  const server = net.createServer((client) => {
    if (closing) return void client.destroy();
    const upstream = net.connect(port, "127.0.0.1");
    sockets.add(client).add(upstream);
    relay(client, upstream);
    relay(upstream, client);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    delay,
    async close() {
      closing = true;
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

let database: FaultyPostgres;
let proxy: Awaited<ReturnType<typeof startLatencyProxy>>;
let proxiedUrl: string;
let server: TestServer;

beforeAll(async () => {
  database = await startFaultyPostgres();
  const url = new URL(database.url);
  proxy = await startLatencyProxy(Number(url.port));
  url.port = String(proxy.port);
  proxiedUrl = url.toString();
  server = await startTestServer({}, { databaseUrl: proxiedUrl, db: database.query } as TestServer);
}, 120_000);

afterAll(async () => {
  await server?.close();
  await proxy?.close();
  await database?.close();
}, 60_000);

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

test("when a database 200 ms away (each way) comes back from an outage, then the circuit closes within 10 s and requests are served", async () => {
  const caller = await createTestCaller(server.url);
  await database.stop();
  let ready = 0;
  for (const deadline = Date.now() + 15_000; Date.now() < deadline && ready !== 503; await sleep(200)) {
    ready = (await http(server.url, "GET", "/v1/health/ready")).status;
  }
  expect(ready).toBe(503);

  // The database comes back, far away.
  proxy.delay.ms = 200;
  await database.start();
  const back = Date.now();
  // It answers: a new connection and a query through the proxy, as the probe makes them.
  const client = new pg.Client({ connectionString: proxiedUrl });
  await client.connect();
  expect((await client.query("SELECT 1 AS one")).rows).toEqual([{ one: 1 }]);
  await client.end();
  const reachedMs = Date.now() - back;

  for (const deadline = back + 10_000; Date.now() < deadline && ready !== 200; await sleep(200)) {
    ready = (await http(server.url, "GET", "/v1/health/ready")).status;
  }
  expect({ ready, reachedMs: reachedMs < 10_000 }).toEqual({ ready: 200, reachedMs: true });
  expect((await http(server.url, "GET", "/control/v1/auth/api-keys", { token: caller.token })).status).toBe(200);
}, 120_000);
