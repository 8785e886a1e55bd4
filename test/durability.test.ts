/**
 * Durability modes of the metering group commit (issue 12, item 1; README "Durability"):
 * `SWITCHYARD_DURABILITY=database` (default) commits every flush synchronously (on disk before
 * the answer, by the server's own `synchronous_commit`, which this mode leaves alone), `process`
 * turns `synchronous_commit` off for the flush's transaction only. What
 * each mode promises for a crash of the Switchyard process is tested in restart.test.ts; here,
 * that each server's flushes ask PostgreSQL for the commit their mode names (`set_config(…, true)`:
 * local to the flush's own transaction, so every other statement keeps the server's setting).
 */
import { CHAT_MODEL, type TestServer, createTestCaller, http, startTestServer } from "./support/harness.js";

interface Seen {
  text: string;
  values: unknown[];
}

/**
 * Records the named statements `server` runs on its pool's connections from now on (the group
 * commit takes a connection for its transaction: each one is watched as the pool hands it out).
 */
function watchNamedStatements(server: TestServer): Seen[] {
  type Query = (config: unknown, ...rest: unknown[]) => unknown;
  const pool = (server.app.dataSource.driver as unknown as { master: NodeJS.EventEmitter }).master;
  const seen: Seen[] = [];
  const watched = new WeakSet<object>();
  pool.on("acquire", (client: { query: Query }) => {
    if (watched.has(client)) return;
    watched.add(client);
    const original = client.query.bind(client);
    client.query = (config: unknown, ...rest: unknown[]) => {
      const c = config as { name?: string; text?: string; values?: unknown[] };
      if (c?.name?.startsWith("switchyard_group_commit_")) seen.push({ text: c.text!, values: c.values! });
      return original(config, ...rest);
    };
  });
  return seen;
}

async function chatOnce(server: TestServer): Promise<void> {
  const caller = await createTestCaller(server.url);
  const res = await http(server.url, "POST", "/v1/chat/completions", {
    token: caller.key,
    body: { model: CHAT_MODEL, messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 4 },
  });
  expect(res.status).toBe(200);
}

describe.each([
  ["database", undefined, "on"],
  ["process", "process" as const, "off"],
])("durability %s", (_mode, durability, expected) => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer(durability ? { durability } : {});
  }, 30_000);
  afterAll(() => server.close());

  test(`when a request is metered, then its flush ${expected === "off" ? "turns synchronous_commit off for its own transaction" : "leaves synchronous_commit as the server has it"}`, async () => {
    const seen = watchNamedStatements(server);
    await chatOnce(server);
    expect(seen.length).toBeGreaterThan(0);
    // The mode is part of the statement's text (one prepared statement per mode and batch shape).
    for (const s of seen) {
      if (expected === "off") expect(s.text).toContain("set_config('synchronous_commit', 'off', true)");
      else expect(s.text).not.toContain("synchronous_commit");
    }
  });
});
