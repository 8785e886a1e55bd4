/**
 * Review of issue 8 (accounts, teams, authorization) from a hostile client's side: races on roles,
 * invitation tokens at rest, throttle keys, and bad input that must never reach a 500. Each test
 * names the rule it holds the code to (DESIGN §3 Credentials, Roles, Errors).
 */
import type { AddressInfo } from "node:net";
import { type Client, createClient } from "graphql-ws";
import pg from "pg";
import { SMTPServer } from "smtp-server";
import WebSocket from "ws";
import {
  CHAT_MODEL,
  EMBED_MODEL,
  type TestServer,
  activityByCustomId,
  createTestApiKey,
  createTestUser,
  eventually,
  expectEnvelope,
  http,
  startTestServer,
} from "./support/harness.js";
import { freshEmail, invite, joinTeam } from "./support/teams.js";

// A real SMTP server that accepts everything (the mail itself is not read here).
let delivered = 0;
const smtp = new SMTPServer({
  authOptional: true,
  disabledCommands: ["STARTTLS", "AUTH"],
  logger: false,
  onData(stream, _session, callback) {
    stream.on("data", () => undefined);
    stream.on("end", () => {
      delivered++;
      callback();
    });
  },
});

let server: TestServer;

beforeAll(async () => {
  await new Promise<void>((resolve) => smtp.listen(0, "127.0.0.1", resolve));
  const port = (smtp.server.address() as AddressInfo).port;
  server = await startTestServer({ smtpUrl: `smtp://127.0.0.1:${port}`, authThrottleMax: 100_000 });
}, 60_000);
afterAll(async () => {
  await server?.close();
  await new Promise<void>((resolve) => smtp.close(() => resolve()));
});

const patchMember = (token: string, userId: string, body: unknown) =>
  http(server.url, "PATCH", `/control/v1/teams/me/members/${userId}`, { token, body });
const deleteMember = (token: string, userId: string) =>
  http(server.url, "DELETE", `/control/v1/teams/me/members/${userId}`, { token });
const gql = (token: string | undefined, query: string, variables: Record<string, unknown> = {}) =>
  http(server.url, "POST", "/graphql", { token, body: { query, variables } });

/**
 * Holds the row lock of team `teamId` (as a member change does) on a connection of its own, runs
 * `blocked` (a request that must wait for that lock), waits until it does, then runs `meanwhile`
 * in the lock's transaction and commits: what `meanwhile` changes commits before the request
 * goes on, as a concurrent member change that won the lock would.
 */
async function whileTeamLocked<T>(
  teamId: string,
  blocked: () => Promise<T>,
  meanwhile: (db: pg.Client) => Promise<void>,
): Promise<T> {
  const db = new pg.Client({ connectionString: server.databaseUrl });
  await db.connect();
  try {
    await db.query("BEGIN");
    await db.query("SELECT 1 FROM teams WHERE id = $1 FOR UPDATE", [teamId]);
    const answer = blocked();
    const waiting = await eventually(async () => {
      // Inside a transaction the statistics views are a snapshot taken once: take a new one.
      await db.query("SELECT pg_stat_clear_snapshot()");
      const { rows } = await db.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_stat_activity
          WHERE wait_event_type = 'Lock' AND query LIKE '%FROM teams WHERE id = $1 FOR UPDATE%'`,
      );
      return rows[0].n > 0;
    }, 10_000);
    expect(waiting).toBe(true);
    await meanwhile(db);
    await db.query("COMMIT");
    return await answer;
  } finally {
    await db.end();
  }
}

describe("roles decided on the caller's role as it stands under the team lock", () => {
  test("when an owner is demoted while their request to remove another owner waits for the team, then that request is refused (403) and the owner stays", async () => {
    const owner = await createTestUser(server.url);
    const second = await joinTeam(server.url, owner, "owner");
    const third = await joinTeam(server.url, owner, "owner");
    // `second` removes `owner`; meanwhile `owner` demotes `second` (committed first).
    const res = await whileTeamLocked(
      owner.teamId,
      () => deleteMember(second.token, owner.userId),
      async (db) => {
        await db.query("UPDATE users SET role = 'member' WHERE id = $1", [second.userId]);
      },
    );
    expectEnvelope(res, 403);
    const [row] = await server.db<{ team_id: string; role: string }>("SELECT team_id, role FROM users WHERE id = $1", [
      owner.userId,
    ]);
    expect(row).toEqual({ team_id: owner.teamId, role: "owner" });
    expect(third.teamId).toBe(owner.teamId);
  });

  test("when an admin is demoted while their request to make someone admin waits, then it is refused (403)", async () => {
    const owner = await createTestUser(server.url);
    const admin = await joinTeam(server.url, owner, "admin");
    const member = await joinTeam(server.url, owner, "member");
    const res = await whileTeamLocked(
      owner.teamId,
      () => patchMember(admin.token, member.userId, { role: "admin" }),
      async (db) => {
        await db.query("UPDATE users SET role = 'member' WHERE id = $1", [admin.userId]);
      },
    );
    expectEnvelope(res, 403);
    const [row] = await server.db<{ role: string }>("SELECT role FROM users WHERE id = $1", [member.userId]);
    expect(row.role).toBe("member");
  });

  test("when an admin is demoted while their invitation waits for the team, then no invitation is made", async () => {
    const owner = await createTestUser(server.url);
    const admin = await joinTeam(server.url, owner, "admin");
    const email = freshEmail();
    const res = await whileTeamLocked(
      owner.teamId,
      () => invite(server.url, admin.token, email, "admin"),
      async (db) => {
        await db.query("UPDATE users SET role = 'member' WHERE id = $1", [admin.userId]);
      },
    );
    expectEnvelope(res, 403);
    expect(await server.db("SELECT 1 FROM team_invitations WHERE email = $1", [email])).toHaveLength(0);
  });

  test("when two owners demote each other at once, then exactly one succeeds (the other, demoted first, gets 403) and the team keeps an owner", async () => {
    const owner = await createTestUser(server.url);
    const second = await joinTeam(server.url, owner, "owner");
    const [a, b] = await Promise.all([
      patchMember(owner.token, second.userId, { role: "member" }),
      patchMember(second.token, owner.userId, { role: "member" }),
    ]);
    // The loser runs second, as a member by then: no longer allowed to change roles at all.
    expect([a.status, b.status].sort()).toEqual([200, 403]);
    const owners = await server.db("SELECT 1 FROM users WHERE team_id = $1 AND role = 'owner'", [owner.teamId]);
    expect(owners).toHaveLength(1);
  });
});

describe("invitation tokens at rest", () => {
  test("when SMTP took the invitation mail, then the outbox keeps no usable token (as for reset mail)", async () => {
    const owner = await createTestUser(server.url);
    const email = freshEmail();
    const before = delivered;
    const res = await invite(server.url, owner.token, email);
    expect(res.status).toBe(201);
    expect(await eventually(async () => delivered > before, 10_000)).toBe(true);
    const [mail] = await server.db<{ body_text: string; sent_at: Date | null }>(
      "SELECT body_text, sent_at FROM mail_outbox WHERE to_address = $1",
      [email],
    );
    expect(mail.sent_at).not.toBeNull();
    expect(mail.body_text).not.toContain(res.body.invite_token);
  });
});

/** A graphql-ws client that presents `authorization` when it connects. */
function wsClient(authorization: string): Client {
  return createClient({
    url: `${server.url.replace(/^http/, "ws")}/graphql`,
    webSocketImpl: WebSocket,
    connectionParams: { authorization },
    retryAttempts: 0,
    lazy: false,
    // A socket closed by the server (4403) reaches the operations as their error; no console noise.
    onNonLazyError: () => undefined,
  });
}

/** One operation over the socket: its data, or the `status_code` of its first error (or the close code). */
function overSocket(client: Client, query: string): Promise<{ data?: any; status?: number }> {
  return new Promise((resolve) => {
    let data: any;
    client.subscribe(
      { query },
      {
        next: (result) => {
          if (result.errors?.length) resolve({ status: result.errors[0].extensions?.status_code as number });
          else data = result.data;
        },
        error: (err) => resolve({ status: (err as { code?: number }).code ?? -1 }),
        complete: () => resolve({ data }),
      },
    );
  });
}

const RESPONSES = `{ responses { data { id } } }`;
const CREATE_KEY = `mutation { createApiKey(input: { name: "from the socket" }) { plaintext } }`;

describe("graphql-ws sockets follow revocations", () => {
  test("when a member is removed, then their open socket no longer reads the team's responses or makes keys", async () => {
    const owner = await createTestUser(server.url);
    const member = await joinTeam(server.url, owner);
    const key = await createTestApiKey(server.url, member.token);
    const made = await http(server.url, "POST", "/v1/responses", {
      token: owner.token,
      body: { model: CHAT_MODEL, input: "team secret", max_output_tokens: 2 },
    });
    expect(made.status).toBe(200);
    for (const credential of [key.key, member.token]) {
      const client = wsClient(`Bearer ${credential}`);
      try {
        const before = await overSocket(client, RESPONSES);
        expect(before.data.responses.data.map((r: { id: string }) => r.id)).toContain(made.body.id);
      } finally {
        await client.dispose();
      }
    }
    const byKey = wsClient(`Bearer ${key.key}`);
    const byToken = wsClient(`Bearer ${member.token}`);
    try {
      // Both sockets are open (and authenticated) before the removal.
      expect((await overSocket(byKey, `{ me { id } }`)).data.me.id).toBe(member.userId);
      expect((await overSocket(byToken, `{ me { id } }`)).data.me.id).toBe(member.userId);
      expect((await deleteMember(owner.token, member.userId)).status).toBe(204);
      for (const client of [byKey, byToken]) {
        // The operation is refused (401), or the socket was closed already (4403).
        const read = await overSocket(client, RESPONSES);
        expect(read.data).toBeUndefined();
        expect([401, 4403]).toContain(read.status);
        const minted = await overSocket(client, CREATE_KEY);
        expect(minted.data).toBeUndefined();
      }
    } finally {
      await byKey.dispose();
      await byToken.dispose();
    }
    const keys = await server.db("SELECT 1 FROM api_keys WHERE name = 'from the socket'");
    expect(keys).toHaveLength(0);
  });

  test("when the key a socket connected with is revoked, or the password is reset, then the socket cannot mint a new key", async () => {
    const user = await createTestUser(server.url);
    const key = await createTestApiKey(server.url, user.token);
    const byKey = wsClient(`Bearer ${key.key}`);
    const byToken = wsClient(`Bearer ${user.token}`);
    try {
      expect((await overSocket(byKey, `{ me { id } }`)).data.me.id).toBe(user.userId);
      expect((await overSocket(byToken, `{ me { id } }`)).data.me.id).toBe(user.userId);
      expect(
        (await http(server.url, "DELETE", `/control/v1/auth/api-keys/${key.id}`, { token: user.token })).status,
      ).toBe(204);
      // The user's sessions end as a reset would end them (tokens issued before now are void).
      await server.db("UPDATE users SET tokens_valid_after = now() WHERE id = $1", [user.userId]);
      await server.db("SELECT pg_notify('switchyard_cache', 'user:' || $1::text)", [user.userId]);
      await eventually(
        async () => (await http(server.url, "GET", "/control/v1/auth/me", { token: user.token })).status === 401,
        5_000,
      );
      for (const client of [byKey, byToken]) {
        const minted = await overSocket(client, CREATE_KEY);
        expect(minted.data).toBeUndefined();
        expect([401, 4403]).toContain(minted.status);
      }
      expect(await server.db("SELECT 1 FROM api_keys WHERE name = 'from the socket'")).toHaveLength(0);
    } finally {
      await byKey.dispose();
      await byToken.dispose();
    }
  });
});

describe("graphql-ws subscriptions follow revocations", () => {
  test("when a subscribed member is removed, then the subscription ends (4403) and no later event of the team reaches it", async () => {
    const owner = await createTestUser(server.url);
    const member = await joinTeam(server.url, owner);
    const key = await createTestApiKey(server.url, member.token);
    const client = wsClient(`Bearer ${key.key}`);
    const received: string[] = [];
    const closed: number[] = [];
    try {
      client.subscribe(
        { query: `subscription { completionEvents { responseId } }` },
        {
          next: (r) => received.push((r.data as any)?.completionEvents?.responseId),
          error: (err) => closed.push((err as { code?: number }).code ?? -1),
          complete: () => undefined,
        },
      );
      const subscribers = server.app.events.subscribers;
      await eventually(async () => server.app.events.subscribers >= subscribers, 2_000);
      // Subscribed: an event of the team arrives.
      const first = await http(server.url, "POST", "/v1/responses", {
        token: owner.token,
        body: { model: CHAT_MODEL, input: "before", max_output_tokens: 2 },
      });
      expect(await eventually(async () => received.includes(first.body.id), 10_000)).toBe(true);
      expect((await deleteMember(owner.token, member.userId)).status).toBe(204);
      expect(await eventually(async () => closed.length > 0, 5_000)).toBe(true);
      expect(closed).toEqual([4403]);
      const after = await http(server.url, "POST", "/v1/responses", {
        token: owner.token,
        body: { model: CHAT_MODEL, input: "after", max_output_tokens: 2 },
      });
      expect(after.status).toBe(200);
      await new Promise((resolve) => setTimeout(resolve, 500));
      expect(received).not.toContain(after.body.id);
    } finally {
      await client.dispose();
    }
  });
});

describe("expired invitations", () => {
  test("when an invitation has expired, then the team no longer lists it as a pending member, and it cannot be changed", async () => {
    const owner = await createTestUser(server.url);
    const email = freshEmail();
    const invited = await invite(server.url, owner.token, email);
    expect(invited.status).toBe(201);
    await server.db("UPDATE team_invitations SET expires_at = now() - interval '1 second' WHERE email = $1", [email]);
    const read = await http(server.url, "GET", "/control/v1/teams/me", { token: owner.token });
    expect(read.body.members.map((m: { email: string }) => m.email)).toEqual([owner.email]);
    const graph = await gql(owner.token, `{ team { members { email } } }`);
    expect(graph.body.data.team.members).toEqual([{ email: owner.email }]);
    expectEnvelope(await patchMember(owner.token, invited.body.user_id, { role: "admin" }), 404);
    // Inviting the address again works as for a new one.
    const again = await invite(server.url, owner.token, email);
    expect(again.status).toBe(201);
    expect((await http(server.url, "GET", "/control/v1/teams/me", { token: owner.token })).body.members).toHaveLength(
      2,
    );
  });
});

describe("throttle keys", () => {
  test("when a login names the account in other cases and with spaces, then it counts on the same account", async () => {
    const limited = await startTestServer({ authThrottleMax: 3 }, server);
    try {
      const user = await createTestUser(limited.url);
      const variants = [user.email, ` ${user.email.toUpperCase()} `, `\t${user.email}`];
      for (const username of variants) {
        const res = await http(limited.url, "POST", "/control/v1/auth/login", {
          body: { username, password: "wrong password" },
        });
        expect(res.status).toBe(401);
      }
      const res = await http(limited.url, "POST", "/control/v1/auth/login", {
        body: { email: user.email.toUpperCase(), password: user.password },
      });
      expectEnvelope(res, 429);
    } finally {
      await limited.close();
    }
  });
});

describe("bad input never reaches a 500", () => {
  test("when member, key and invitation endpoints get odd ids, tokens and bodies, then 4xx envelopes", async () => {
    const owner = await createTestUser(server.url);
    const member = await joinTeam(server.url, owner);
    const cases: Array<[string, string, unknown]> = [
      ["PATCH", `/control/v1/teams/me/members/${member.userId}`, "null"],
      ["PATCH", `/control/v1/teams/me/members/${member.userId}`, "[]"],
      ["PATCH", `/control/v1/teams/me/members/${member.userId}`, { role: ["owner"] }],
      ["PATCH", `/control/v1/teams/me/members/${member.userId}`, { role: "OWNER" }],
      ["PATCH", "/control/v1/teams/me/members/00000000-0000-0000-0000-000000000000", { role: "member" }],
      ["PATCH", "/control/v1/teams/me/members/%00", { role: "member" }],
      ["DELETE", "/control/v1/teams/me/members/%E0%A4%A", undefined],
      ["DELETE", "/control/v1/auth/api-keys/%ZZ", undefined],
      ["POST", "/control/v1/teams/invitations/%00/accept", undefined],
      ["POST", "/control/v1/teams/invitations/%E0%A4%A/accept", undefined],
      ["POST", `/control/v1/teams/invitations/${"a".repeat(5000)}/accept`, undefined],
      ["POST", "/control/v1/teams/me/members", { email: "a@b.c", role: null }],
      ["POST", "/control/v1/teams/me/members", { email: `${"a".repeat(400)}@example.com` }],
      ["PATCH", "/control/v1/teams/me", { email_domain: "" }],
      ["PATCH", "/control/v1/teams/me", { name: "\ud800" }],
      ["PATCH", "/control/v1/teams/me", { webhook_signing_secret: 5 }],
      ["PATCH", "/control/v1/teams/me", { zero_data_retention_enabled: "true" }],
      ["POST", "/control/v1/auth/api-keys", { name: "k", expires_at: "+275760-09-13T00:00:00.000Z" }],
      ["POST", "/control/v1/auth/api-keys", { name: "k", expires_at: "9999-12-31T23:59:59.999+14:00" }],
    ];
    for (const [method, path, body] of cases) {
      const res = await http(server.url, method, path, { token: owner.token, body });
      expect({ method, path, body, status: res.status < 500 ? "not 5xx" : res.status }).toEqual({
        method,
        path,
        body,
        status: "not 5xx",
      });
      if (res.status >= 400) expectEnvelope(res, res.status);
    }
    for (const [method, path, body] of [
      ["POST", "/control/v1/auth/login", { username: "a@b.c", password: "\u0000" }],
      ["POST", "/control/v1/auth/login", { username: "\ud800@b.c", password: "x" }],
      ["POST", "/control/v1/auth/signup", { email: "a@b.c", password: "12345678", invite_token: "\u0000" }],
      ["POST", "/control/v1/auth/reset-password", { token: "\ud800", password: "12345678" }],
      ["POST", "/control/v1/auth/forgot-password", { email: ["a@b.c"] }],
      ["POST", "/control/v1/auth/oauth/complete", { provider: "x", id_token: "a.b.c" }],
      ["GET", "/control/v1/auth/oauth/%00/authorize", undefined],
    ] as const) {
      const res = await http(server.url, method, path, { body });
      expect({ path, body, status: res.status < 500 ? "not 5xx" : res.status }).toEqual({
        path,
        body,
        status: "not 5xx",
      });
    }
  });

  test("when GraphQL member and key mutations get odd ids, then status_code 400 or 404, never 500", async () => {
    const owner = await createTestUser(server.url);
    for (const [query, variables] of [
      [`mutation($id: ID!) { updateMember(userId: $id, input: { role: "member" }) { userId } }`, { id: "nope" }],
      [`mutation($id: ID!) { removeMember(userId: $id) }`, { id: "" }],
      [`mutation($id: ID!) { removeMember(userId: $id) }`, { id: 12 }],
      [`mutation($id: String!) { revokeApiKey(id: $id) }`, { id: "\u0000" }],
      [`mutation($t: String!) { acceptInvitation(token: $t) { accessToken } }`, { t: "" }],
      [`mutation($t: String!) { acceptInvitation(token: $t) { accessToken } }`, { t: "\ud800" }],
      [
        `mutation { updateMember(userId: "00000000-0000-0000-0000-000000000000", input: { role: "x" }) { userId } }`,
        {},
      ],
    ] as const) {
      const res = await gql(owner.token, query, variables);
      const code = res.status === 200 ? res.body.errors?.[0]?.extensions?.status_code : res.status;
      expect({ query, code: code >= 400 && code < 500 ? "4xx" : code }).toEqual({ query, code: "4xx" });
    }
  });
});

describe("zero data retention on the other create operations", () => {
  test("when the team keeps no bodies, then embeddings and messages activity has none either", async () => {
    const owner = await createTestUser(server.url);
    const key = await createTestApiKey(server.url, owner.token);
    const on = await http(server.url, "PATCH", "/control/v1/teams/me", {
      token: owner.token,
      body: { zero_data_retention_enabled: true },
    });
    expect(on.status).toBe(200);
    const embed = await http(server.url, "POST", "/v1/embeddings", {
      token: key.key,
      body: { model: EMBED_MODEL, input: "secret words", metadata: { custom_id: "zdr-embed" } },
    });
    expect(embed.status).toBe(200);
    const messages = await http(server.url, "POST", "/v1/messages", {
      token: key.key,
      body: {
        model: CHAT_MODEL,
        max_tokens: 2,
        messages: [{ role: "user", content: "secret words" }],
        metadata: { custom_id: "zdr-messages" },
      },
    });
    expect(messages.status).toBe(200);
    const chat = await http(server.url, "POST", "/v1/chat/completions", {
      token: key.key,
      body: {
        model: CHAT_MODEL,
        max_tokens: 2,
        stream: true,
        messages: [{ role: "user", content: "secret words" }],
        metadata: { custom_id: "zdr-stream" },
      },
    });
    expect(chat.status).toBe(200);
    for (const id of ["zdr-embed", "zdr-messages", "zdr-stream"]) {
      const row = await activityByCustomId(server, id);
      expect(row).toMatchObject({ body_json: null, result_json: null });
      expect(row.total_tokens).toBeGreaterThan(0);
    }
  });
});
