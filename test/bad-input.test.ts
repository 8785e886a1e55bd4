/**
 * Bad input never reaches a 500 (issue 5, item 3): deep JSON, text PostgreSQL cannot store, chat
 * messages without content, non-decimal query integers and access tokens with missing or odd
 * claims, each through the real HTTP server (and GraphQL where the same service answers it).
 */
import { SignJWT } from "jose";
import {
  CHAT_MODEL,
  type TestServer,
  createTestCaller,
  createTestUser,
  expectEnvelope,
  expectInvalid,
  http,
  startTestServer,
} from "./support/harness.js";

const SECRET = "test-secret-test-secret-test-secret-0123";

let server: TestServer;
let caller: Awaited<ReturnType<typeof createTestCaller>>;
beforeAll(async () => {
  server = await startTestServer({ jwtSecret: SECRET });
  caller = await createTestCaller(server.url);
});
afterAll(() => server.close());

let emailSeq = 0;
function freshEmail(tag = "bad"): string {
  return `${tag}-${++emailSeq}-${Date.now().toString(36)}@example.com`;
}

async function count(sql: string, params: unknown[] = []): Promise<number> {
  const rows = await server.db<{ n: string }>(sql, params);
  return Number(rows[0].n);
}

/** `depth` nested arrays around a 1, as raw JSON text. */
function nested(depth: number): string {
  return "[".repeat(depth) + "1" + "]".repeat(depth);
}

function chatBody(extra: string): string {
  return `{"model":"${CHAT_MODEL}","max_tokens":2,"messages":[{"role":"user","content":"Hi"}],"extra":${extra}}`;
}

describe("JSON nesting", () => {
  it("when a chat body nests 10,000 levels deep, then 400 naming the body and nothing is run or charged", async () => {
    const before = await count("SELECT count(*) AS n FROM activity WHERE team_id = $1", [caller.teamId]);
    const res = await http(server.url, "POST", "/v1/chat/completions", {
      token: caller.key,
      body: chatBody(nested(10_000)),
    });
    expectInvalid(res, "body");
    expect(res.body.detail).toMatch(/64/);
    // Another request is served and recorded; the refused one left no row.
    const ok = await http(server.url, "POST", "/v1/chat/completions", { token: caller.key, body: chatBody("1") });
    expect(ok.status).toBe(200);
    const after = await count("SELECT count(*) AS n FROM activity WHERE team_id = $1", [caller.teamId]);
    expect(after - before).toBeLessThanOrEqual(1);
  });

  it("when a body nests 65 levels, then 400; 64 levels is accepted", async () => {
    const deep = await http(server.url, "POST", "/v1/embeddings", {
      token: caller.key,
      body: `{"model":"x","input":"a","extra":${nested(64)}}`,
    });
    expectInvalid(deep, "body");
    // The outer object is level 1, so 63 arrays inside it make 64.
    const fits = await http(server.url, "POST", "/v1/embeddings", {
      token: caller.key,
      body: `{"model":"no-such-model","input":"a","extra":${nested(63)}}`,
    });
    expectEnvelope(fits, 404);
  });

  it("when brackets sit inside strings, then they do not count as nesting", async () => {
    const res = await http(server.url, "POST", "/control/v1/auth/login", {
      body: JSON.stringify({ username: "[".repeat(300) + '\\"{' + "{".repeat(300), password: "x" }),
    });
    expectEnvelope(res, 400);
    expect(res.body.extra.map((i: { field: string }) => i.field)).not.toContain("body");
  });

  it("when a control-plane body nests too deep, then 400 and no account is created", async () => {
    const email = freshEmail("deep");
    const res = await http(server.url, "POST", "/control/v1/auth/signup", {
      body: `{"email":"${email}","password":"correct horse battery","x":${nested(5_000)}}`,
    });
    expectInvalid(res, "body");
    expect(await count("SELECT count(*) AS n FROM users WHERE email = $1", [email])).toBe(0);
  });

  it("when a GraphQL body nests too deep in its variables, then a 400 request error, not an internal one", async () => {
    const res = await http(server.url, "POST", "/graphql", {
      body: `{"query":"{ models { id } }","variables":{"x":${nested(10_000)}}}`,
    });
    expect(res.status).toBe(400);
    expect(res.body.errors[0].extensions).toEqual(expect.objectContaining({ status_code: 400 }));
    expect(res.body.errors[0].extensions.code).not.toBe("INTERNAL");
  });

  it("when a GraphQL request asks for a persisted query, then a 400 that does not say internal", async () => {
    const res = await http(server.url, "POST", "/graphql", {
      body: { extensions: { persistedQuery: { version: 1, sha256Hash: "x" } } },
    });
    // Apollo answers the persisted-query protocol with HTTP 200 (what APQ clients expect).
    expect(res.body.errors[0].extensions).toEqual(
      expect.objectContaining({ code: "PERSISTED_QUERY_NOT_SUPPORTED", status_code: 400 }),
    );
  });
});

describe("text PostgreSQL cannot store", () => {
  const ODD = { nul: "a\u0000b", "lone high surrogate": "a\ud800b", "lone low surrogate": "\udc00" };

  for (const [label, value] of Object.entries(ODD)) {
    it(`when login's username or email holds a ${label}, then 400 naming it`, async () => {
      expectInvalid(
        await http(server.url, "POST", "/control/v1/auth/login", { body: { username: value, password: "whatever1" } }),
        "username",
      );
      expectInvalid(
        await http(server.url, "POST", "/control/v1/auth/login", { body: { email: value, password: "whatever1" } }),
        "email",
      );
    });

    it(`when signup's name, email or password holds a ${label}, then 400 naming it and nothing is stored`, async () => {
      const users = await count("SELECT count(*) AS n FROM users");
      const teams = await count("SELECT count(*) AS n FROM teams");
      const base = { email: freshEmail("odd"), password: "correct horse battery", name: "Ada" };
      for (const field of ["name", "email", "password"] as const) {
        const body = { ...base, [field]: field === "email" ? `x${value}@example.com` : `${value}long enough` };
        expectInvalid(await http(server.url, "POST", "/control/v1/auth/signup", { body }), field);
      }
      expect(await count("SELECT count(*) AS n FROM users")).toBe(users);
      expect(await count("SELECT count(*) AS n FROM teams")).toBe(teams);
    });

    it(`when an API key name holds a ${label}, then 400 naming it and no key is created`, async () => {
      const keys = await count("SELECT count(*) AS n FROM api_keys");
      const res = await http(server.url, "POST", "/control/v1/auth/api-keys", {
        token: caller.token,
        body: { name: `key ${value}` },
      });
      expectInvalid(res, "name");
      expect(await count("SELECT count(*) AS n FROM api_keys")).toBe(keys);
    });
  }

  it("when a surrogate pair (an emoji) is in a name, then it is stored as sent", async () => {
    const res = await http(server.url, "POST", "/control/v1/auth/api-keys", {
      token: caller.token,
      body: { name: "rocket \ud83d\ude80" },
    });
    expect(res.status).toBe(201);
    expect(res.body.name).toBe("rocket 🚀");
  });

  it("when GraphQL's signup carries a NUL in the name, then the same 400 details as REST", async () => {
    const res = await http(server.url, "POST", "/graphql", {
      body: {
        query: "mutation ($input: SignupInput!) { signup(input: $input) { accessToken } }",
        variables: { input: { email: freshEmail("gql"), password: "correct horse battery", name: "a\u0000b" } },
      },
    });
    expect(res.body.errors).toHaveLength(1);
    expect(res.body.errors[0].extensions.status_code).toBe(400);
    expect(res.body.errors[0].extensions.extra.map((i: { field: string }) => i.field)).toEqual(["name"]);
  });
});

describe("chat messages", () => {
  const chat = (messages: unknown) =>
    http(server.url, "POST", "/v1/chat/completions", {
      token: caller.key,
      body: { model: CHAT_MODEL, max_tokens: 2, messages },
    });

  it("when a message has no content, then 400 naming messages[i].content", async () => {
    expectInvalid(await chat([{ role: "user" }]), "messages[0].content");
    expectInvalid(await chat([{ role: "system", content: "Be brief" }, { role: "user" }]), "messages[1].content");
  });

  it("when a message's content is null (an assistant turn without tool calls), then 400", async () => {
    const res = await chat([
      { role: "user", content: "Hi" },
      { role: "assistant", content: null },
      { role: "user", content: "Again" },
    ]);
    expectInvalid(res, "messages[1].content");
  });

  it("when content is a string or text parts, then 200", async () => {
    expect((await chat([{ role: "user", content: "Hi" }])).status).toBe(200);
    expect((await chat([{ role: "user", content: [{ type: "text", text: "Hi" }] }])).status).toBe(200);
  });

  it("when an Anthropic message or a Responses input item has no content, then 400", async () => {
    const msg = await http(server.url, "POST", "/v1/messages", {
      token: caller.key,
      body: { model: CHAT_MODEL, max_tokens: 2, messages: [{ role: "user" }] },
    });
    expectInvalid(msg, "messages[0].content");
    const resp = await http(server.url, "POST", "/v1/responses", {
      token: caller.key,
      body: { model: CHAT_MODEL, max_output_tokens: 2, input: [{ role: "user" }] },
    });
    expectInvalid(resp, "input[0].content");
  });
});

describe("query integers", () => {
  const list = (query: string) => http(server.url, "GET", `/v1/responses?${query}`, { token: caller.key });

  it.each([
    "limit=0x10",
    "limit=1e2",
    "limit=%205",
    "limit=%2B5",
    "limit=5.0",
    "limit=-1",
    "limit=1&limit=2",
    "limit=",
  ])("when %s, then 400 naming limit", async (query) => {
    expectInvalid(await list(query), "limit");
  });

  it("when limit is decimal digits in range, then 200", async () => {
    expect((await list("limit=16")).status).toBe(200);
    expect((await list("limit=0016")).status).toBe(200);
    expect((await list("")).status).toBe(200);
  });
});

describe("access-token claims", () => {
  const key = new TextEncoder().encode(SECRET);
  let user: Awaited<ReturnType<typeof createTestUser>>;
  beforeAll(async () => {
    user = await createTestUser(server.url);
  });

  /**
   * Signs a token with the server's own secret: the claims the server issues, with `changes`
   * applied (`undefined` removes a claim).
   */
  function token(changes: Record<string, unknown>) {
    const now = Math.floor(Date.now() / 1000);
    const claims: Record<string, unknown> = {
      iss: "switchyard",
      sub: user.userId,
      tid: user.teamId,
      iat: now,
      exp: now + 3600,
    };
    for (const [name, value] of Object.entries(changes)) {
      if (value === undefined) delete claims[name];
      else claims[name] = value;
    }
    return new SignJWT(claims).setProtectedHeader({ alg: "HS256", typ: "JWT" }).sign(key);
  }

  const me = (t: string) => http(server.url, "GET", "/control/v1/auth/me", { token: t });

  it("when every claim is right, then 200 (the control for the refusals below)", async () => {
    expect((await me(await token({}))).status).toBe(200);
  });

  it("when the token has no exp, then 401", async () => {
    expectEnvelope(await me(await token({ exp: undefined })), 401);
  });

  it("when sub is not a UUID, a number, or missing, then 401", async () => {
    expectEnvelope(await me(await token({ sub: "not-a-uuid" })), 401);
    expectEnvelope(await me(await token({ sub: "x\u0000" })), 401);
    expectEnvelope(await me(await token({ sub: 42 })), 401);
    expectEnvelope(await me(await token({ sub: undefined })), 401);
  });

  it("when tid is not a UUID, or iat is missing or not a number, then 401", async () => {
    expectEnvelope(await me(await token({ tid: "team" })), 401);
    expectEnvelope(await me(await token({ tid: { a: 1 } })), 401);
    expectEnvelope(await me(await token({ iat: "now" })), 401);
    expectEnvelope(await me(await token({ iat: undefined })), 401);
  });

  it("when the token is long garbage in the header, then an envelope and never a 5xx", async () => {
    const res = await me(`eyJ${"A".repeat(12_000)}.e30.x`);
    expectEnvelope(res, 401);
  });
});
