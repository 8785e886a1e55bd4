/**
 * Control-plane auth over REST (signup, login, the current user, API keys) and the data-plane
 * `GET /v1/auth/me`: real HTTP against a real PostgreSQL (DESIGN §3 Credentials, Account schemas,
 * Roles, Errors).
 */
import { createHash } from "node:crypto";
import { SignJWT } from "jose";
import {
  type TestServer,
  type TestUser,
  createTestApiKey,
  createTestUser,
  expectEnvelope,
  expectInvalid,
  http,
  startTestServer,
} from "./support/harness.js";

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(() => server.close());

const PASSWORD = "correct horse battery";
const KEY_PATTERN = /^sk_[0-9A-Za-z]{48}$/;
const USER_KEYS = ["created_at", "email", "id", "name", "role", "team_id", "username"];
/** A key's policy and spend (issue 29, item 1; test/api-key-policy.test.ts checks their values). */
const POLICY_KEYS = [
  "allowed_models",
  "budget_micros",
  "budget_period",
  "budget_resets_at",
  "remaining_micros",
  "rpm_limit",
  "spent_micros",
  "tpm_limit",
];
const LIST_ITEM_KEYS = [
  "created_at",
  "expires_at",
  "id",
  "last_used_at",
  "name",
  "prefix",
  "revoked_at",
  ...POLICY_KEYS,
].sort();

let emailSeq = 0;
function freshEmail(tag = "auth"): string {
  return `${tag}-${++emailSeq}-${Date.now().toString(36)}@example.com`;
}

async function count(sql: string, params: unknown[] = []): Promise<number> {
  const rows = await server.db<{ n: string }>(sql, params);
  return Number(rows[0].n);
}

function signup(body: unknown) {
  return http(server.url, "POST", "/control/v1/auth/signup", { body });
}

function login(body: unknown) {
  return http(server.url, "POST", "/control/v1/auth/login", { body });
}

function createKey(token: string | undefined, body: unknown) {
  return http(server.url, "POST", "/control/v1/auth/api-keys", { token, body });
}

function listKeys(token?: string) {
  return http(server.url, "GET", "/control/v1/auth/api-keys", { token });
}

function revokeKey(token: string | undefined, id: string) {
  return http(server.url, "DELETE", `/control/v1/auth/api-keys/${id}`, { token });
}

function dataPlaneMe(token?: string, headers?: Record<string, string>) {
  return http(server.url, "GET", "/v1/auth/me", { token, headers });
}

function expectIsoTime(value: unknown): void {
  expect(typeof value).toBe("string");
  expect(new Date(value as string).toISOString()).toBe(value);
}

/** A user moved into `team` as a member by SQL, then logged in again (tokens carry the team id). */
async function memberOf(team: TestUser): Promise<TestUser> {
  // The signup token is never used, so no process has cached this user with its old team.
  const user = await createTestUser(server.url);
  await server.db("UPDATE users SET team_id = $1, role = 'member' WHERE id = $2", [team.teamId, user.userId]);
  const res = await login({ username: user.email, password: user.password });
  expect(res.status).toBe(200);
  return { ...user, token: res.body.access_token, teamId: team.teamId };
}

describe("POST /control/v1/auth/signup", () => {
  test("when the input is valid, then 201 with the token, the user, and next_step login", async () => {
    const email = freshEmail("Signup").replace("signup", "SignUp");
    const res = await signup({ email, password: PASSWORD, name: "Ada Lovelace" });
    expect(res.status).toBe(201);
    expect(Object.keys(res.body).sort()).toEqual([
      "access_token",
      "expires_in",
      "message",
      "next_step",
      "token_type",
      "user",
    ]);
    expect(res.body).toEqual(
      expect.objectContaining({
        message: expect.any(String),
        next_step: "login",
        token_type: "bearer",
        expires_in: 24 * 3600,
        access_token: expect.any(String),
      }),
    );
    const user = res.body.user;
    expect(Object.keys(user).sort()).toEqual(USER_KEYS);
    expect(user).toEqual(
      expect.objectContaining({
        username: email.toLowerCase(),
        email: email.toLowerCase(),
        name: "Ada Lovelace",
        role: "owner",
      }),
    );
    expect(user.id).toMatch(/^[0-9a-f-]{36}$/);
    expect(user.team_id).toMatch(/^[0-9a-f-]{36}$/);
    expectIsoTime(user.created_at);

    const me = await http(server.url, "GET", "/control/v1/auth/me", { token: res.body.access_token });
    expect(me.status).toBe(200);
    expect(me.body.id).toBe(user.id);
  });

  test("when a team is created, then it holds the signup grant as one ledger row", async () => {
    const user = await createTestUser(server.url);
    const ledger = await server.db(
      "SELECT type, amount_micros, balance_after_micros FROM credit_ledger WHERE team_id = $1",
      [user.teamId],
    );
    expect(ledger).toEqual([{ type: "grant", amount_micros: "5000000", balance_after_micros: "5000000" }]);
    const teams = await server.db("SELECT credit_balance_micros FROM teams WHERE id = $1", [user.teamId]);
    expect(teams).toEqual([{ credit_balance_micros: "5000000" }]);
    const owners = await server.db("SELECT role FROM users WHERE team_id = $1", [user.teamId]);
    expect(owners).toEqual([{ role: "owner" }]);
  });

  test("when the password is too short or the email is malformed, then 400 naming the field and nothing is stored", async () => {
    const teamsBefore = await count("SELECT count(*) AS n FROM teams");
    const usersBefore = await count("SELECT count(*) AS n FROM users");
    const email = freshEmail();

    expectInvalid(await signup({ email, password: "short" }), "password");
    expectInvalid(await signup({ email: "not-an-email", password: PASSWORD }), "email");
    expectInvalid(await signup({ email, password: "x".repeat(129) }), "password");
    expectInvalid(await signup({ password: PASSWORD }), "email");
    expectInvalid(await signup({ email, password: 12345678 }), "password");
    expectInvalid(await signup([email, PASSWORD]), "body");

    expect(await count("SELECT count(*) AS n FROM users WHERE lower(email) = $1", [email])).toBe(0);
    expect(await count("SELECT count(*) AS n FROM teams")).toBe(teamsBefore);
    expect(await count("SELECT count(*) AS n FROM users")).toBe(usersBefore);
  });

  test("when the email is registered (in another case), then 409 and no team or user is added", async () => {
    const email = freshEmail("dup");
    expect((await signup({ email, password: PASSWORD })).status).toBe(201);
    const teamsBefore = await count("SELECT count(*) AS n FROM teams");
    const usersBefore = await count("SELECT count(*) AS n FROM users");
    const ledgerBefore = await count("SELECT count(*) AS n FROM credit_ledger");

    const res = await signup({ email: email.toUpperCase(), password: "another password" });
    expectEnvelope(res, 409);

    expect(await count("SELECT count(*) AS n FROM teams")).toBe(teamsBefore);
    expect(await count("SELECT count(*) AS n FROM users")).toBe(usersBefore);
    expect(await count("SELECT count(*) AS n FROM credit_ledger")).toBe(ledgerBefore);
    // The first account keeps its password.
    expect((await login({ email, password: PASSWORD })).status).toBe(200);
    expect((await login({ email, password: "another password" })).status).toBe(401);
  });

  test("when an invite_token names no invitation, then 404 and nothing is stored", async () => {
    const email = freshEmail("invite");
    const res = await signup({ email, password: PASSWORD, invite_token: "no-such-invitation" });
    expectEnvelope(res, 404);
    expect(await count("SELECT count(*) AS n FROM users WHERE email = $1", [email])).toBe(0);
  });
});

describe("POST /control/v1/auth/login", () => {
  let user: TestUser;
  beforeAll(async () => {
    user = await createTestUser(server.url, { name: "Grace" });
  });

  test("when logging in with username, then 200 with a working token and the user", async () => {
    const res = await login({ username: user.email, password: user.password });
    expect(res.status).toBe(200);
    expect(Object.keys(res.body).sort()).toEqual(["access_token", "expires_in", "token_type", "user"]);
    expect(res.body).toEqual(
      expect.objectContaining({ token_type: "bearer", expires_in: 24 * 3600, access_token: expect.any(String) }),
    );
    expect(Object.keys(res.body.user).sort()).toEqual(USER_KEYS);
    expect(res.body.user).toEqual(
      expect.objectContaining({ id: user.userId, team_id: user.teamId, email: user.email, name: "Grace" }),
    );
    const me = await dataPlaneMe(res.body.access_token);
    expect(me.status).toBe(200);
    expect(me.body.username).toBe(user.email);
  });

  test("when logging in with email in another case, then 200", async () => {
    const res = await login({ email: `  ${user.email.toUpperCase()}`, password: user.password });
    expect(res.status).toBe(200);
    expect(res.body.user.id).toBe(user.userId);
  });

  test("when the password is wrong or the email unknown, then 401 with identical bodies", async () => {
    const wrong = await login({ username: user.email, password: "wrong password" });
    const unknown = await login({ username: freshEmail("nobody"), password: "wrong password" });
    expectEnvelope(wrong, 401);
    expectEnvelope(unknown, 401);
    expect(wrong.text).toBe(unknown.text);
  });

  test("when neither username nor email, or no password, is given, then 400 naming the field", async () => {
    expectInvalid(await login({ password: PASSWORD }), "username");
    expectInvalid(await login({ username: user.email }), "password");
    expectInvalid(await login({ username: 42, password: PASSWORD }), "username");
  });
});

describe("GET /control/v1/auth/me", () => {
  test("when called with an access token or an API key, then 200 with the same user", async () => {
    const user = await createTestUser(server.url, { name: "Linus" });
    const key = await createTestApiKey(server.url, user.token);
    const byToken = await http(server.url, "GET", "/control/v1/auth/me", { token: user.token });
    const byKey = await http(server.url, "GET", "/control/v1/auth/me", { token: key.key });
    expect(byToken.status).toBe(200);
    expect(byKey.status).toBe(200);
    expect(Object.keys(byToken.body).sort()).toEqual(USER_KEYS);
    expect(byToken.body).toEqual({
      username: user.email,
      role: "owner",
      id: user.userId,
      email: user.email,
      name: "Linus",
      team_id: user.teamId,
      created_at: expect.any(String),
    });
    expectIsoTime(byToken.body.created_at);
    expect(byKey.body).toEqual(byToken.body);
  });

  test("when no credentials are sent, then 401", async () => {
    expectEnvelope(await http(server.url, "GET", "/control/v1/auth/me"), 401);
  });
});

describe("GET /v1/auth/me", () => {
  test("when called with an access token, then 200 with exactly username and role", async () => {
    const user = await createTestUser(server.url);
    const res = await dataPlaneMe(user.token);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ username: user.email, role: "owner" });
  });

  test("when an API key is sent as Bearer or as x-api-key, then 200 with the key's user", async () => {
    const user = await createTestUser(server.url);
    const key = await createTestApiKey(server.url, user.token);
    const bearer = await dataPlaneMe(key.key);
    const header = await dataPlaneMe(undefined, { "x-api-key": key.key });
    expect(bearer.status).toBe(200);
    expect(bearer.body).toEqual({ username: user.email, role: "owner" });
    expect(header.status).toBe(200);
    expect(header.body).toEqual({ username: user.email, role: "owner" });
  });

  test("when no credentials are sent, then 401", async () => {
    expectEnvelope(await dataPlaneMe(), 401);
    expectEnvelope(await dataPlaneMe(undefined, { authorization: "Bearer" }), 401);
    expectEnvelope(await dataPlaneMe(undefined, { authorization: "Basic dXNlcjpwYXNz" }), 401);
  });

  test("when the bearer token is garbage, forged, unsigned or expired, then 401", async () => {
    const user = await createTestUser(server.url);
    const secret = new TextEncoder().encode(server.app.config.jwtSecret);
    const sign = (key: Uint8Array, expiresAt: number | string) =>
      new SignJWT({ tid: user.teamId })
        .setProtectedHeader({ alg: "HS256", typ: "JWT" })
        .setSubject(user.userId)
        .setIssuer("switchyard")
        .setIssuedAt(Math.floor(Date.now() / 1000) - 7200)
        .setExpirationTime(expiresAt)
        .sign(key);
    // Control: a token signed with the server's secret is accepted, so the rejections below are
    // about the signature and the expiry, not the claims.
    expect((await dataPlaneMe(await sign(secret, "1h"))).status).toBe(200);

    const forged = await sign(new TextEncoder().encode("another-secret-another-secret-0123456"), "1h");
    const expired = await sign(secret, Math.floor(Date.now() / 1000) - 60);
    const [header, payload] = user.token.split(".");
    const unsigned = `${Buffer.from(JSON.stringify({ alg: "none", typ: "JWT" })).toString("base64url")}.${payload}.`;
    const tampered = `${header}.${Buffer.from(JSON.stringify({ sub: user.userId, tid: user.teamId, iss: "switchyard", iat: 1, exp: 4102444800 })).toString("base64url")}.${user.token.split(".")[2]}`;
    for (const token of ["garbage", "a.b.c", forged, expired, unsigned, tampered, `sk_${"A".repeat(48)}`]) {
      const res = await dataPlaneMe(token);
      expectEnvelope(res, 401);
    }
  });
});

describe("POST /control/v1/auth/api-keys", () => {
  let user: TestUser;
  beforeAll(async () => {
    user = await createTestUser(server.url);
  });

  test("when a name is given, then 201 with an sk_ key shown once, its prefix, and only its hash stored", async () => {
    const res = await createKey(user.token, { name: "  ci key  " });
    expect(res.status).toBe(201);
    expect(Object.keys(res.body).sort()).toEqual(
      ["created_at", "expires_at", "id", "name", "plaintext", "prefix", ...POLICY_KEYS].sort(),
    );
    const { plaintext } = res.body;
    expect(plaintext).toMatch(KEY_PATTERN);
    expect(res.body.prefix).toBe(plaintext.slice(0, 12));
    expect(res.body.name).toBe("ci key");
    expect(res.body.expires_at).toBeNull();
    expectIsoTime(res.body.created_at);

    const rows = await server.db<{ row: string }>("SELECT row_to_json(k)::text AS row FROM api_keys k WHERE id = $1", [
      res.body.id,
    ]);
    expect(rows).toHaveLength(1);
    expect(rows[0].row).not.toContain(plaintext);
    const hash = await server.db(
      "SELECT encode(key_hash, 'hex') AS hash, user_id, team_id FROM api_keys WHERE id = $1",
      [res.body.id],
    );
    expect(hash).toEqual([
      {
        hash: createHash("sha256").update(plaintext).digest("hex"),
        user_id: user.userId,
        team_id: user.teamId,
      },
    ]);
  });

  test("when two keys are created, then they differ", async () => {
    const a = await createTestApiKey(server.url, user.token);
    const b = await createTestApiKey(server.url, user.token);
    expect(a.key).not.toBe(b.key);
    expect(a.id).not.toBe(b.id);
  });

  test("when expires_at is in the future, then 201, it is echoed, and the key works until then", async () => {
    const expiresAt = new Date(Date.now() + 3600_000).toISOString();
    const res = await createKey(user.token, { name: "expiring", expires_at: expiresAt });
    expect(res.status).toBe(201);
    expect(res.body.expires_at).toBe(expiresAt);
    expect((await dataPlaneMe(res.body.plaintext)).status).toBe(200);
  });

  test("when the name is 200 characters, then 201", async () => {
    const res = await createKey(user.token, { name: "n".repeat(200) });
    expect(res.status).toBe(201);
    expect(res.body.name).toHaveLength(200);
  });

  test("when the name is empty, blank or over 200, or expires_at is past or malformed, then 400 and no key is stored", async () => {
    const before = await count("SELECT count(*) AS n FROM api_keys WHERE team_id = $1", [user.teamId]);
    expectInvalid(await createKey(user.token, { name: "" }), "name");
    expectInvalid(await createKey(user.token, { name: "   " }), "name");
    expectInvalid(await createKey(user.token, { name: "n".repeat(201) }), "name");
    expectInvalid(await createKey(user.token, {}), "name");
    expectInvalid(await createKey(user.token, { name: 7 }), "name");
    const past = await createKey(user.token, { name: "old", expires_at: new Date(Date.now() - 60_000).toISOString() });
    expectInvalid(past, "expires_at");
    expectInvalid(await createKey(user.token, { name: "bad", expires_at: "tomorrow" }), "expires_at");
    expect(await count("SELECT count(*) AS n FROM api_keys WHERE team_id = $1", [user.teamId])).toBe(before);
  });

  test("when no credentials are sent, then 401 and no key is stored", async () => {
    const before = await count("SELECT count(*) AS n FROM api_keys");
    expectEnvelope(await createKey(undefined, { name: "anon" }), 401);
    expect(await count("SELECT count(*) AS n FROM api_keys")).toBe(before);
  });
});

describe("GET /control/v1/auth/api-keys", () => {
  test("when keys exist, then 200 lists them newest first without the plaintext", async () => {
    const user = await createTestUser(server.url);
    const first = await createTestApiKey(server.url, user.token, "first");
    const second = await createTestApiKey(server.url, user.token, "second");
    const third = await createTestApiKey(server.url, user.token, "third");
    const res = await listKeys(user.token);
    expect(res.status).toBe(200);
    expect(Object.keys(res.body)).toEqual(["items"]);
    expect(res.body.items.map((k: { name: string }) => k.name)).toEqual(["third", "second", "first"]);
    expect(res.body.items.map((k: { id: string }) => k.id)).toEqual([third.id, second.id, first.id]);
    for (const item of res.body.items) {
      expect(Object.keys(item).sort()).toEqual(LIST_ITEM_KEYS);
      expectIsoTime(item.created_at);
      expect(item.revoked_at).toBeNull();
      expect(item.expires_at).toBeNull();
    }
    expect(res.body.items[2].prefix).toBe(first.prefix);
    for (const key of [first, second, third]) expect(res.text).not.toContain(key.key);
    expect(res.text).not.toContain("plaintext");
  });

  test("when another team lists its keys, then this team's keys are not among them", async () => {
    const owner = await createTestUser(server.url);
    const mine = await createTestApiKey(server.url, owner.token, "mine");
    const other = await createTestUser(server.url);
    const theirs = await createTestApiKey(server.url, other.token, "theirs");
    const res = await listKeys(other.token);
    expect(res.status).toBe(200);
    expect(res.body.items.map((k: { id: string }) => k.id)).toEqual([theirs.id]);
    expect(res.text).not.toContain(mine.id);
  });

  test("when no credentials are sent, then 401", async () => {
    expectEnvelope(await listKeys(), 401);
  });
});

describe("DELETE /control/v1/auth/api-keys/{key_id}", () => {
  test("when a used key is revoked, then 204 and the key is refused at once", async () => {
    const user = await createTestUser(server.url);
    const keep = await createTestApiKey(server.url, user.token, "keep");
    // Several rounds: the key is in the credential cache each time, so the 401 relies on the
    // revoke having evicted it (NOTIFY) before the 204 went out.
    for (let round = 0; round < 30; round++) {
      const key = await createTestApiKey(server.url, user.token, `revoke-${round}`);
      expect((await dataPlaneMe(key.key)).status).toBe(200);
      const res = await revokeKey(user.token, key.id);
      expect(res.status).toBe(204);
      expect(res.text).toBe("");
      expectEnvelope(await dataPlaneMe(key.key), 401);
      expectEnvelope(await dataPlaneMe(undefined, { "x-api-key": key.key }), 401);
    }
    expect((await dataPlaneMe(keep.key)).status).toBe(200);
  });

  test("when a key is revoked twice, then 204 both times and revoked_at keeps the first time", async () => {
    const user = await createTestUser(server.url);
    const key = await createTestApiKey(server.url, user.token);
    expect((await revokeKey(user.token, key.id)).status).toBe(204);
    const first = (await listKeys(user.token)).body.items[0];
    expectIsoTime(first.revoked_at);
    expect((await revokeKey(user.token, key.id)).status).toBe(204);
    const second = (await listKeys(user.token)).body.items[0];
    expect(second.id).toBe(key.id);
    expect(second.revoked_at).toBe(first.revoked_at);
  });

  test("when the key id is not a uuid, then 400 naming key_id", async () => {
    const user = await createTestUser(server.url);
    expectInvalid(await revokeKey(user.token, "not-a-uuid"), "key_id");
  });

  test("when the key belongs to another team or does not exist, then 404 and the key still works", async () => {
    const owner = await createTestUser(server.url);
    const key = await createTestApiKey(server.url, owner.token);
    const intruder = await createTestUser(server.url);
    expectEnvelope(await revokeKey(intruder.token, key.id), 404);
    expectEnvelope(await revokeKey(intruder.token, "00000000-0000-7000-8000-000000000000"), 404);
    expect((await dataPlaneMe(key.key)).status).toBe(200);
    const rows = await server.db("SELECT revoked_at FROM api_keys WHERE id = $1", [key.id]);
    expect(rows).toEqual([{ revoked_at: null }]);
  });

  test("when no credentials are sent, then 401 and the key still works", async () => {
    const user = await createTestUser(server.url);
    const key = await createTestApiKey(server.url, user.token);
    expectEnvelope(await revokeKey(undefined, key.id), 401);
    expect((await dataPlaneMe(key.key)).status).toBe(200);
  });
});

describe("API key lifetime", () => {
  test("when a key's expires_at has passed, then 401", async () => {
    const user = await createTestUser(server.url);
    const key = await createTestApiKey(server.url, user.token);
    // Never used before, so no credential cache holds it: the next use reads the row.
    await server.db("UPDATE api_keys SET expires_at = now() - interval '1 minute' WHERE id = $1", [key.id]);
    const res = await dataPlaneMe(key.key);
    expectEnvelope(res, 401);
    expect(res.body.detail).toMatch(/expired/i);
    expectEnvelope(await http(server.url, "GET", "/control/v1/auth/me", { token: key.key }), 401);
  });
});

describe("roles", () => {
  test("when a member lists keys, then only their own keys show, and an owner sees every key of the team", async () => {
    const owner = await createTestUser(server.url);
    const ownerKey = await createTestApiKey(server.url, owner.token, "owner key");
    const member = await memberOf(owner);
    const memberKey = await createTestApiKey(server.url, member.token, "member key");

    const me = await http(server.url, "GET", "/control/v1/auth/me", { token: member.token });
    expect(me.body).toEqual(expect.objectContaining({ role: "member", team_id: owner.teamId }));
    expect((await dataPlaneMe(memberKey.key)).body).toEqual({ username: member.email, role: "member" });

    const memberList = await listKeys(member.token);
    expect(memberList.body.items.map((k: { id: string }) => k.id)).toEqual([memberKey.id]);
    const ownerList = await listKeys(owner.token);
    expect(ownerList.body.items.map((k: { id: string }) => k.id)).toEqual([memberKey.id, ownerKey.id]);
  });

  test("when a member revokes another user's key, then 404 and that key still works; the owner may revoke the member's key", async () => {
    const owner = await createTestUser(server.url);
    const ownerKey = await createTestApiKey(server.url, owner.token);
    const member = await memberOf(owner);
    const memberKey = await createTestApiKey(server.url, member.token);

    expectEnvelope(await revokeKey(member.token, ownerKey.id), 404);
    expect((await dataPlaneMe(ownerKey.key)).status).toBe(200);

    expect((await dataPlaneMe(memberKey.key)).status).toBe(200);
    expect((await revokeKey(owner.token, memberKey.id)).status).toBe(204);
    expectEnvelope(await dataPlaneMe(memberKey.key), 401);
  });

  test("when a user's team changes, then access tokens issued for the old team are refused", async () => {
    const owner = await createTestUser(server.url);
    const user = await createTestUser(server.url);
    await server.db("UPDATE users SET team_id = $1, role = 'member' WHERE id = $2", [owner.teamId, user.userId]);
    expectEnvelope(await dataPlaneMe(user.token), 401);
  });
});
