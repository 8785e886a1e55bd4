/**
 * Two API processes on one database (DESIGN §1: API processes are stateless, caches are
 * invalidated through NOTIFY): a key revoked on one is refused on the other, and a team that
 * spends its credit on one gets 402 on the other, both without waiting for cache expiry.
 */
import {
  CHAT_MODEL,
  type TestServer,
  createTestCaller,
  eventually,
  expectEnvelope,
  http,
  startTestServer,
} from "./support/harness.js";

let a: TestServer;
let b: TestServer;

beforeAll(async () => {
  a = await startTestServer({ authCacheTtlMs: 3_600_000 });
  b = await startTestServer({ authCacheTtlMs: 3_600_000 }, a);
});
afterAll(async () => {
  await b.close();
  await a.close();
});

const chat = { model: CHAT_MODEL, messages: [{ role: "user", content: "Tom" }], max_tokens: 8, temperature: 0 };

test("when a key is revoked on one process, then the other refuses it without waiting for its cache to expire", async () => {
  const caller = await createTestCaller(a.url);
  expect((await http(b.url, "GET", "/v1/auth/me", { token: caller.key })).status).toBe(200); // cached on b
  expect(
    (await http(a.url, "DELETE", `/control/v1/auth/api-keys/${caller.keyId}`, { token: caller.token })).status,
  ).toBe(204);
  expect(
    await eventually(async () => (await http(b.url, "GET", "/v1/auth/me", { token: caller.key })).status === 401),
  ).toBe(true);
});

test("when a team's credit runs out on one process, then the other answers 402 without waiting for its cache to expire", async () => {
  const caller = await createTestCaller(a.url);
  expect((await http(b.url, "POST", "/v1/chat/completions", { token: caller.key, body: chat })).status).toBe(200); // b caches 5 USD
  // Leave 2 µUSD, then spend exactly that on `a`: 3 prompt tokens at 0.02 and 40 completion tokens
  // at 0.05 µUSD each (2.06, rounded), which is also the request's worst case, so it is admitted.
  await a.db("UPDATE teams SET credit_balance_micros = 2 WHERE id = $1", [caller.teamId]);
  const spend = await http(a.url, "POST", "/v1/chat/completions", {
    token: caller.key,
    body: { ...chat, max_tokens: 40 },
  });
  expect(spend.status).toBe(200);
  const [team] = await a.db<any>("SELECT credit_balance_micros FROM teams WHERE id = $1", [caller.teamId]);
  expect(team.credit_balance_micros).toBe("0");
  expect(
    await eventually(
      async () => (await http(b.url, "POST", "/v1/chat/completions", { token: caller.key, body: chat })).status === 402,
    ),
  ).toBe(true);
  expectEnvelope(await http(b.url, "POST", "/v1/chat/completions", { token: caller.key, body: chat }), 402);
});

test("when a process's listening connection is killed, then it reconnects and still hears revocations", async () => {
  const caller = await createTestCaller(a.url);
  expect((await http(b.url, "GET", "/v1/auth/me", { token: caller.key })).status).toBe(200);
  // Kill every listening connection of both processes (the database side of a network blip).
  const killed = await a.db<any>(
    "SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity WHERE application_name = 'switchyard-listen' AND datname = current_database()",
  );
  expect(killed.length).toBe(2);
  expect(
    await eventually(async () => {
      const rows = await a.db<any>(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'switchyard-listen' AND datname = current_database()",
      );
      return rows[0].n === 2;
    }),
  ).toBe(true);
  expect((await http(b.url, "GET", "/v1/auth/me", { token: caller.key })).status).toBe(200); // cached again on b
  expect(
    (await http(a.url, "DELETE", `/control/v1/auth/api-keys/${caller.keyId}`, { token: caller.token })).status,
  ).toBe(204);
  expect(
    await eventually(async () => (await http(b.url, "GET", "/v1/auth/me", { token: caller.key })).status === 401),
  ).toBe(true);
});
