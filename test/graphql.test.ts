/**
 * The GraphQL surface of the control plane over real HTTP (POST /graphql) and graphql-ws: the
 * same resolvers as REST, so the same answers and the same validation details; errors carry
 * `extensions.status_code` and `extensions.extra`. Also checks that the committed
 * `schema.graphql` matches the schema the resolvers build (`npm run schema` regenerates it).
 */
import { readFileSync } from "node:fs";
import { lexicographicSortSchema, printSchema } from "graphql";
import { createClient } from "graphql-ws";
import WebSocket from "ws";
import { buildSchemaForEmit } from "../src/scripts/emit-schema.js";
import { SCHEMA_FILE } from "../src/server.js";
import {
  CHAT_MODEL,
  EMBED_MODEL,
  type TestServer,
  type TestUser,
  createTestApiKey,
  createTestUser,
  http,
  startTestServer,
} from "./support/harness.js";

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(() => server.close());

const PASSWORD = "correct horse battery";

interface GraphqlAnswer {
  status: number;
  data: any;
  errors: Array<{ message: string; path?: string[]; extensions: Record<string, any> }> | undefined;
}

async function gql(query: string, variables?: Record<string, unknown>, token?: string): Promise<GraphqlAnswer> {
  const res = await http(server.url, "POST", "/graphql", { body: { query, variables }, token });
  if (typeof res.body !== "object" || res.body === null)
    throw new Error(`not a GraphQL answer: ${res.status} ${res.text}`);
  return { status: res.status, data: res.body.data, errors: res.body.errors };
}

/** The single error of an answer, with its status code. */
function onlyError(answer: GraphqlAnswer, statusCode: number) {
  expect(answer.errors).toHaveLength(1);
  const error = answer.errors![0];
  expect(error.extensions.status_code).toBe(statusCode);
  expect(typeof error.message).toBe("string");
  return error;
}

async function count(sql: string, params: unknown[] = []): Promise<number> {
  const rows = await server.db<{ n: string }>(sql, params);
  return Number(rows[0].n);
}

let emailSeq = 0;
function freshEmail(tag = "gql"): string {
  return `${tag}-${++emailSeq}-${Date.now().toString(36)}@example.com`;
}

const ME = "query { me { username role id email name teamId createdAt } }";
const SIGNUP = `mutation ($input: SignupInput!) {
  signup(input: $input) { message nextStep accessToken tokenType expiresIn user { id email name role teamId } }
}`;
const LOGIN = `mutation ($input: LoginInput!) {
  login(input: $input) { accessToken tokenType expiresIn user { id email } }
}`;
const CREATE_KEY = `mutation ($input: CreateApiKeyInput!) {
  createApiKey(input: $input) { id name plaintext prefix createdAt expiresAt }
}`;
const REVOKE_KEY = "mutation ($id: String!) { revokeApiKey(id: $id) }";
const LIST_KEYS = "query { apiKeys { items { id name prefix createdAt revokedAt } } }";

describe("query me", () => {
  let user: TestUser;
  beforeAll(async () => {
    user = await createTestUser(server.url, { name: "Edsger" });
  });

  test("when called with an access token or an API key, then the signed-in user", async () => {
    const byToken = await gql(ME, undefined, user.token);
    expect(byToken.status).toBe(200);
    expect(byToken.errors).toBeUndefined();
    expect(byToken.data.me).toEqual({
      username: user.email,
      role: "owner",
      id: user.userId,
      email: user.email,
      name: "Edsger",
      teamId: user.teamId,
      createdAt: expect.any(String),
    });
    const rest = await http(server.url, "GET", "/control/v1/auth/me", { token: user.token });
    expect(byToken.data.me.createdAt).toBe(rest.body.created_at);

    const key = await createTestApiKey(server.url, user.token);
    const byKey = await gql(ME, undefined, key.key);
    expect(byKey.data.me).toEqual(byToken.data.me);
  });

  test("when no credentials are sent, then an error with status_code 401 and no data", async () => {
    const answer = await gql(ME);
    const error = onlyError(answer, 401);
    expect(error.extensions.code).toBe("UNAUTHENTICATED");
    expect(error.path).toEqual(["me"]);
    expect(answer.data).toBeNull();
  });

  test("when the bearer token is garbage or a revoked key, then 401", async () => {
    const garbage = await gql(ME, undefined, "garbage");
    const error = onlyError(garbage, 401);
    expect(error.extensions.code).toBe("UNAUTHENTICATED");
    expect(error.message).toMatch(/invalid or expired/i);

    const key = await createTestApiKey(server.url, user.token);
    expect(
      (await http(server.url, "DELETE", `/control/v1/auth/api-keys/${key.id}`, { token: user.token })).status,
    ).toBe(204);
    const revoked = await gql(ME, undefined, key.key);
    expect(onlyError(revoked, 401).extensions.code).toBe("UNAUTHENTICATED");
  });

  test("when a stale token comes with an operation that needs none, then it still runs (login)", async () => {
    const LOGIN_ONLY = `mutation ($input: LoginInput!) { login(input: $input) { accessToken } }`;
    const answer = await gql(
      LOGIN_ONLY,
      { input: { username: user.email, password: user.password } },
      "expired-or-garbage",
    );
    expect(answer.errors).toBeUndefined();
    expect(answer.data.login.accessToken.split(".")).toHaveLength(3);
  });

  test("when the query names an unknown field, then an error with status_code 400", async () => {
    const answer = await gql("query { me { nope } }", undefined, user.token);
    expect(answer.status).toBe(400);
    expect(onlyError(answer, 400).extensions.code).toBe("GRAPHQL_VALIDATION_FAILED");
  });
});

describe("mutation signup", () => {
  test("when the input is valid, then the token, the user and the signup grant", async () => {
    const email = freshEmail();
    const answer = await gql(SIGNUP, { input: { email, password: PASSWORD, name: "Barbara" } });
    expect(answer.errors).toBeUndefined();
    const result = answer.data.signup;
    expect(result).toEqual({
      message: expect.any(String),
      nextStep: "login",
      accessToken: expect.any(String),
      tokenType: "bearer",
      expiresIn: 24 * 3600,
      user: { id: expect.any(String), email, name: "Barbara", role: "owner", teamId: expect.any(String) },
    });
    const me = await gql(ME, undefined, result.accessToken);
    expect(me.data.me.id).toBe(result.user.id);
    const ledger = await server.db("SELECT type, amount_micros FROM credit_ledger WHERE team_id = $1", [
      result.user.teamId,
    ]);
    expect(ledger).toEqual([{ type: "grant", amount_micros: "5000000" }]);
  });

  test("when optional fields are null, then they count as absent", async () => {
    const email = freshEmail();
    const answer = await gql(SIGNUP, { input: { email, password: PASSWORD, name: null, inviteToken: null } });
    expect(answer.errors).toBeUndefined();
    expect(answer.data.signup.user).toEqual(expect.objectContaining({ email, name: "" }));
  });

  test("when an inviteToken is given, then it reaches the service: 404 for the unknown invitation, nothing stored", async () => {
    const email = freshEmail("invite");
    const answer = await gql(SIGNUP, { input: { email, password: PASSWORD, inviteToken: "any-token" } });
    const error = onlyError(answer, 404);
    expect(error.extensions.code).toBe("NOT_FOUND");
    expect(answer.data).toBeNull();
    const rest = await http(server.url, "POST", "/control/v1/auth/signup", {
      body: { email, password: PASSWORD, invite_token: "any-token" },
    });
    expect(rest.status).toBe(404);
    expect(error.message).toBe(rest.body.detail);
    expect(await count("SELECT count(*) AS n FROM users WHERE email = $1", [email])).toBe(0);
  });

  test("when the password is too short, then 400 with the same detail and extra as REST", async () => {
    const email = freshEmail();
    const input = { email, password: "short" };
    const error = onlyError(await gql(SIGNUP, { input }), 400);
    const rest = await http(server.url, "POST", "/control/v1/auth/signup", { body: input });
    expect(rest.status).toBe(400);
    expect(error.message).toBe(rest.body.detail);
    expect(error.extensions.extra).toEqual(rest.body.extra);
    expect(error.extensions.extra.map((i: { field: string }) => i.field)).toEqual(["password"]);
    expect(await count("SELECT count(*) AS n FROM users WHERE email = $1", [email])).toBe(0);
  });

  test("when the email is registered, then 409", async () => {
    const user = await createTestUser(server.url);
    const error = onlyError(await gql(SIGNUP, { input: { email: user.email.toUpperCase(), password: PASSWORD } }), 409);
    expect(error.extensions.code).toBe("CONFLICT");
  });
});

describe("mutation login", () => {
  let user: TestUser;
  beforeAll(async () => {
    user = await createTestUser(server.url);
  });

  test("when logging in with username or with email, then a working access token", async () => {
    for (const input of [
      { username: user.email, password: user.password },
      { email: user.email, password: user.password },
    ]) {
      const answer = await gql(LOGIN, { input });
      expect(answer.errors).toBeUndefined();
      expect(answer.data.login).toEqual({
        accessToken: expect.any(String),
        tokenType: "bearer",
        expiresIn: 24 * 3600,
        user: { id: user.userId, email: user.email },
      });
      expect((await gql(ME, undefined, answer.data.login.accessToken)).data.me.id).toBe(user.userId);
    }
  });

  test("when the password is wrong or the email unknown, then 401 with the REST detail", async () => {
    const wrong = onlyError(await gql(LOGIN, { input: { username: user.email, password: "wrong password" } }), 401);
    const unknown = onlyError(
      await gql(LOGIN, { input: { username: freshEmail("nobody"), password: "wrong password" } }),
      401,
    );
    const rest = await http(server.url, "POST", "/control/v1/auth/login", {
      body: { username: user.email, password: "wrong password" },
    });
    expect(wrong.message).toBe(rest.body.detail);
    expect(unknown.message).toBe(wrong.message);
  });

  test("when neither username nor email is given (null counts as absent), then 400 with the REST detail and extra", async () => {
    const error = onlyError(await gql(LOGIN, { input: { password: PASSWORD, username: null } }), 400);
    const rest = await http(server.url, "POST", "/control/v1/auth/login", { body: { password: PASSWORD } });
    expect(rest.status).toBe(400);
    expect(error.message).toBe(rest.body.detail);
    expect(error.extensions.extra).toEqual(rest.body.extra);
    expect(error.extensions.extra.map((i: { field: string }) => i.field)).toEqual(["username"]);
  });
});

describe("API keys", () => {
  let user: TestUser;
  beforeAll(async () => {
    user = await createTestUser(server.url);
  });

  test("when a key is created, then its plaintext is an sk_ key that works on the data plane", async () => {
    const answer = await gql(CREATE_KEY, { input: { name: "x" } }, user.token);
    expect(answer.errors).toBeUndefined();
    const key = answer.data.createApiKey;
    expect(key.plaintext).toMatch(/^sk_[0-9A-Za-z]{48}$/);
    expect(key.prefix).toBe(key.plaintext.slice(0, 12));
    expect(key).toEqual(expect.objectContaining({ name: "x", expiresAt: null }));
    const me = await http(server.url, "GET", "/v1/auth/me", { token: key.plaintext });
    expect(me.body).toEqual({ username: user.email, role: "owner" });
  });

  test("when expiresAt is given, then it reaches the service: echoed in the future, 400 in the past", async () => {
    const future = new Date(Date.now() + 3600_000).toISOString();
    const created = await gql(CREATE_KEY, { input: { name: "expiring", expiresAt: future } }, user.token);
    expect(created.errors).toBeUndefined();
    expect(created.data.createApiKey.expiresAt).toBe(future);
    const rows = await server.db<{ expires_at: Date }>("SELECT expires_at FROM api_keys WHERE id = $1", [
      created.data.createApiKey.id,
    ]);
    expect(rows[0].expires_at.toISOString()).toBe(future);

    const past = new Date(Date.now() - 3600_000).toISOString();
    const error = onlyError(await gql(CREATE_KEY, { input: { name: "old", expiresAt: past } }, user.token), 400);
    expect(error.extensions.extra.map((i: { field: string }) => i.field)).toEqual(["expires_at"]);
  });

  test("when the name is empty, then 400 with the same detail and extra as REST, and no key is stored", async () => {
    const before = await count("SELECT count(*) AS n FROM api_keys WHERE team_id = $1", [user.teamId]);
    const error = onlyError(await gql(CREATE_KEY, { input: { name: "" } }, user.token), 400);
    expect(error.extensions.code).toBe("INVALID_REQUEST");
    const rest = await http(server.url, "POST", "/control/v1/auth/api-keys", { token: user.token, body: { name: "" } });
    expect(rest.status).toBe(400);
    expect(error.message).toBe(rest.body.detail);
    expect(error.extensions.extra).toEqual(rest.body.extra);
    expect(error.extensions.extra.map((i: { field: string }) => i.field)).toEqual(["name"]);
    expect(await count("SELECT count(*) AS n FROM api_keys WHERE team_id = $1", [user.teamId])).toBe(before);
  });

  test("when no credentials are sent, then create and list answer 401", async () => {
    onlyError(await gql(CREATE_KEY, { input: { name: "anon" } }), 401);
    onlyError(await gql(LIST_KEYS), 401);
  });

  test("when keys are listed, then newest first, the same as REST", async () => {
    const owner = await createTestUser(server.url);
    const first = await createTestApiKey(server.url, owner.token, "first");
    const second = await createTestApiKey(server.url, owner.token, "second");
    const answer = await gql(LIST_KEYS, undefined, owner.token);
    expect(answer.errors).toBeUndefined();
    expect(answer.data.apiKeys.items).toEqual([
      { id: second.id, name: "second", prefix: second.prefix, createdAt: expect.any(String), revokedAt: null },
      { id: first.id, name: "first", prefix: first.prefix, createdAt: expect.any(String), revokedAt: null },
    ]);
    const rest = await http(server.url, "GET", "/control/v1/auth/api-keys", { token: owner.token });
    expect(answer.data.apiKeys.items.map((k: { createdAt: string }) => k.createdAt)).toEqual(
      rest.body.items.map((k: { created_at: string }) => k.created_at),
    );
  });

  test("when a key is revoked, then true, the key is refused, and a second revoke is true too", async () => {
    const key = await createTestApiKey(server.url, user.token);
    expect((await http(server.url, "GET", "/v1/auth/me", { token: key.key })).status).toBe(200);
    const answer = await gql(REVOKE_KEY, { id: key.id }, user.token);
    expect(answer.errors).toBeUndefined();
    expect(answer.data).toEqual({ revokeApiKey: true });
    expect((await http(server.url, "GET", "/v1/auth/me", { token: key.key })).status).toBe(401);
    expect((await gql(REVOKE_KEY, { id: key.id }, user.token)).data).toEqual({ revokeApiKey: true });
  });

  test("when the id is not a uuid, then 400 with the same detail and extra as REST", async () => {
    const error = onlyError(await gql(REVOKE_KEY, { id: "not-a-uuid" }, user.token), 400);
    const rest = await http(server.url, "DELETE", "/control/v1/auth/api-keys/not-a-uuid", { token: user.token });
    expect(rest.status).toBe(400);
    expect(error.message).toBe(rest.body.detail);
    expect(error.extensions.extra).toEqual(rest.body.extra);
  });

  test("when the key belongs to another team, then 404 and it still works", async () => {
    const other = await createTestUser(server.url);
    const key = await createTestApiKey(server.url, other.token);
    const error = onlyError(await gql(REVOKE_KEY, { id: key.id }, user.token), 404);
    expect(error.extensions.code).toBe("NOT_FOUND");
    expect((await http(server.url, "GET", "/v1/auth/me", { token: key.key })).status).toBe(200);
  });
});

describe("query models", () => {
  const MODELS = "query { models { id ownedBy pricing { inputPerMillionUsd } capabilities { dimensions } } }";

  test("when listed, then the catalog models as REST lists them", async () => {
    const user = await createTestUser(server.url);
    const answer = await gql(MODELS, undefined, user.token);
    expect(answer.errors).toBeUndefined();
    const byId = new Map(answer.data.models.map((m: { id: string }) => [m.id, m]));
    expect(byId.get(CHAT_MODEL)).toEqual({
      id: CHAT_MODEL,
      ownedBy: "switchyard",
      pricing: { inputPerMillionUsd: 0.02 },
      capabilities: { dimensions: null },
    });
    expect(byId.get(EMBED_MODEL)).toEqual({
      id: EMBED_MODEL,
      ownedBy: "switchyard",
      pricing: { inputPerMillionUsd: 0.01 },
      capabilities: { dimensions: 64 },
    });
    const rest = await http(server.url, "GET", "/v1/models", { token: user.token });
    expect(answer.data.models.map((m: { id: string }) => m.id)).toEqual(
      rest.body.data.map((m: { id: string }) => m.id),
    );
  });

  test("when no credentials are sent, then 401", async () => {
    onlyError(await gql(MODELS), 401);
  });
});

describe("graphql-ws", () => {
  function wsClient(authorization?: string) {
    return createClient({
      url: `${server.url.replace(/^http/, "ws")}/graphql`,
      webSocketImpl: WebSocket,
      connectionParams: authorization ? { authorization } : {},
      retryAttempts: 0,
      lazy: true,
    });
  }

  async function runOnce(client: ReturnType<typeof wsClient>, query: string) {
    const results: Array<{ data?: any; errors?: readonly any[] }> = [];
    for await (const result of client.iterate({ query })) results.push(result);
    return results;
  }

  test("when connected with a bearer token, then the me query runs over the socket", async () => {
    const user = await createTestUser(server.url);
    const client = wsClient(`Bearer ${user.token}`);
    try {
      const results = await runOnce(client, "query { me { id email role } }");
      expect(results).toEqual([{ data: { me: { id: user.userId, email: user.email, role: "owner" } } }]);
    } finally {
      await client.dispose();
    }
  });

  test("when connected with a garbage bearer token, then the socket closes with 4403 Forbidden", async () => {
    const client = wsClient("Bearer garbage");
    try {
      await expect(runOnce(client, "query { me { id } }")).rejects.toMatchObject({ code: 4403 });
    } finally {
      await client.dispose();
    }
  });

  test("when connected without credentials, then me answers 401", async () => {
    const client = wsClient();
    try {
      const results = await runOnce(client, "query { me { id } }");
      expect(results).toHaveLength(1);
      expect(results[0].data).toBeNull();
      expect(results[0].errors).toHaveLength(1);
      expect(results[0].errors![0].message).toMatch(/not authenticated/i);
      // Errors over the socket go through the same formatter as over HTTP.
      expect(results[0].errors![0].extensions).toMatchObject({ code: "UNAUTHENTICATED", status_code: 401 });
    } finally {
      await client.dispose();
    }
  });
});

describe("schema.graphql", () => {
  test("when the schema is built from the resolvers, then the committed schema.graphql matches it", async () => {
    const committed = readFileSync(SCHEMA_FILE, "utf8");
    const built = printSchema(lexicographicSortSchema(await buildSchemaForEmit()));
    // type-graphql writes a comment header, a blank line, then the sorted printSchema output.
    const header = /^(#.*\n)+\n/.exec(committed);
    expect(header).not.toBeNull();
    expect(committed.slice(header![0].length)).toBe(built);
    expect(built).toContain("inviteToken: String");
    expect(built).toContain("expiresAt: String");
  });
});
