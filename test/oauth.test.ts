/**
 * OpenID Connect sign-in and linking (issue 8, item 2; DESIGN §3 Account schemas) end to end:
 * two real OpenID providers (`oidc-provider`) on loopback — `acme` serves profile and email from
 * userinfo, `other` puts them in the ID token — and a real Switchyard over real HTTP and
 * PostgreSQL. Each flow goes authorize helper → the provider's login and consent (driven over
 * HTTP) → the redirect URI's `code`, `state`, `iss` → complete or link-oauth.
 */
import { createHash, randomBytes } from "node:crypto";
import { SignJWT, generateKeyPair } from "jose";
import * as oidc from "openid-client";
import {
  type TestServer,
  createTestApiKey,
  createTestUser,
  expectEnvelope,
  expectInvalid,
  http,
  startTestServer,
} from "./support/harness.js";
import { type TestAccount, type TestOidcProvider, startOidcProvider } from "./support/oidc-provider.js";
import { freshEmail, invite } from "./support/teams.js";

let server: TestServer;
let acme: TestOidcProvider;
let other: TestOidcProvider;

beforeAll(async () => {
  acme = await startOidcProvider();
  other = await startOidcProvider({ idTokenClaims: true });
  server = await startTestServer({
    oauthProviders: [
      acme.config("acme"),
      other.config("other"),
      // Nothing listens on port 9 of loopback (discard): discovery fails.
      {
        name: "down",
        issuer: "http://127.0.0.1:9",
        client_id: "x",
        client_secret: "y",
        redirect_uri: acme.redirectUri,
      },
    ],
  });
});
afterAll(async () => {
  await server?.close();
  await acme?.close();
  await other?.close();
});

let seq = 0;
/** A person at a provider with a fresh subject and email (verified unless said otherwise). */
function person(overrides: Partial<TestAccount> = {}): TestAccount {
  const n = `${++seq}-${randomBytes(3).toString("hex")}`;
  return { sub: `sub-${n}`, email: `oidc-${n}@example.com`, email_verified: true, name: `Person ${n}`, ...overrides };
}

function providerOf(name: string): TestOidcProvider {
  return name === "other" ? other : acme;
}

function authorize(provider: string, token?: string) {
  return http(server.url, "GET", `/control/v1/auth/oauth/${provider}/authorize`, { token });
}

function complete(body: unknown) {
  return http(server.url, "POST", "/control/v1/auth/oauth/complete", { body });
}

function link(token: string | undefined, body: unknown) {
  return http(server.url, "POST", "/control/v1/auth/link-oauth", { token, body });
}

function linkedAccounts(token?: string) {
  return http(server.url, "GET", "/control/v1/auth/linked-accounts", { token });
}

/**
 * Starts a flow with the authorize helper (signed in with `token` when given) and signs in at the
 * provider as `account`: what a web client would hold when the browser comes back.
 */
async function flow(
  provider: string,
  account: TestAccount,
  token?: string,
): Promise<{ code: string; state: string; iss: string; body: { provider: string; code: string; state: string } }> {
  const started = await authorize(provider, token);
  expect(started.status).toBe(200);
  const back = await providerOf(provider).authorize(started.body.authorization_url, account);
  const code = back.searchParams.get("code");
  const state = back.searchParams.get("state");
  if (!code || !state) throw new Error(`no code in ${back.href}`);
  expect(state).toBe(started.body.state);
  return { code, state, iss: back.searchParams.get("iss") ?? "", body: { provider, code, state } };
}

async function count(sql: string, params: unknown[] = []): Promise<number> {
  const rows = await server.db<{ n: string }>(sql, params);
  return Number(rows[0].n);
}

/** Row counts of everything sign-in may write, to show a refused request changed nothing. */
async function snapshot(): Promise<Record<string, number>> {
  const tables = ["users", "teams", "credit_ledger", "oauth_identities", "oauth_states"];
  const out: Record<string, number> = {};
  for (const t of tables) out[t] = await count(`SELECT count(*) AS n FROM ${t}`);
  return out;
}

function me(token: string) {
  return http(server.url, "GET", "/control/v1/auth/me", { token });
}

const USER_KEYS = ["created_at", "email", "id", "name", "role", "team_id", "username"];

describe("GET /control/v1/auth/oauth/{provider}/authorize", () => {
  test("when the provider is configured, then the URL carries state, nonce, PKCE S256 and the client, and only the state's hash is stored", async () => {
    const res = await authorize("acme");
    expect(res.status).toBe(200);
    expect(Object.keys(res.body).sort()).toEqual(["authorization_url", "expires_at", "provider", "state"]);
    expect(res.body.provider).toBe("acme");
    const url = new URL(res.body.authorization_url);
    expect(url.origin).toBe(acme.issuer);
    const q = url.searchParams;
    expect(q.get("response_type")).toBe("code");
    expect(q.get("client_id")).toBe(acme.clientId);
    expect(q.get("redirect_uri")).toBe(acme.redirectUri);
    expect(q.get("scope")).toBe("openid email profile");
    expect(q.get("state")).toBe(res.body.state);
    expect(q.get("code_challenge_method")).toBe("S256");
    expect(q.get("code_challenge")).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(q.get("nonce")).toMatch(/^[A-Za-z0-9_-]{20,}$/);
    expect(res.body.state.length).toBeGreaterThanOrEqual(32);
    const ttl = new Date(res.body.expires_at).getTime() - Date.now();
    expect(ttl).toBeGreaterThan(9 * 60_000);
    expect(ttl).toBeLessThanOrEqual(10 * 60_000);

    const hash = createHash("sha256").update(res.body.state).digest();
    const rows = await server.db<{ code_verifier: string; user_id: string | null }>(
      "SELECT code_verifier, user_id FROM oauth_states WHERE state_hash = $1",
      [hash],
    );
    expect(rows).toHaveLength(1);
    expect(rows[0].user_id).toBeNull();
    // The challenge is the stored verifier's S256; the verifier itself never left the server.
    expect(createHash("sha256").update(rows[0].code_verifier).digest("base64url")).toBe(q.get("code_challenge"));
    expect(res.text).not.toContain(rows[0].code_verifier);
  });

  test("when the caller is signed in, then the state is bound to them; a refused token leaves it unbound", async () => {
    const user = await createTestUser(server.url);
    const signedIn = await authorize("acme", user.token);
    expect(signedIn.status).toBe(200);
    const bad = await authorize("acme", "not-a-token");
    expect(bad.status).toBe(200);
    const owner = async (state: string) =>
      (
        await server.db<{ user_id: string | null }>("SELECT user_id FROM oauth_states WHERE state_hash = $1", [
          createHash("sha256").update(state).digest(),
        ])
      )[0].user_id;
    expect(await owner(signedIn.body.state)).toBe(user.userId);
    expect(await owner(bad.body.state)).toBeNull();
  });

  test("when the provider is not configured, then 404 and nothing is stored", async () => {
    const before = await snapshot();
    for (const name of ["nope", "ACME", "%00", "a".repeat(300)]) {
      expectEnvelope(await authorize(encodeURIComponent(name)), 404);
    }
    expect(await snapshot()).toEqual(before);
  });

  test("when the provider cannot be reached, then 502 and nothing is stored", async () => {
    const before = await snapshot();
    const res = await authorize("down");
    expectEnvelope(res, 502);
    expect(res.body.detail).toContain("down");
    expect(await snapshot()).toEqual(before);
  });
});

describe("POST /control/v1/auth/oauth/complete", () => {
  test("when a new person completes a flow, then a user and team are created and the answer is a working login", async () => {
    const who = person();
    const f = await flow("acme", who);
    expect(f.iss).toBe(acme.issuer);
    const res = await complete({ ...f.body, iss: f.iss });
    expect(res.status).toBe(200);
    expect(Object.keys(res.body).sort()).toEqual(["access_token", "expires_in", "token_type", "user"]);
    expect(res.body.token_type).toBe("bearer");
    expect(res.body.expires_in).toBe(86_400);
    expect(Object.keys(res.body.user).sort()).toEqual(USER_KEYS);
    // acme serves the email from userinfo only: it was fetched there.
    expect(res.body.user).toMatchObject({ email: who.email, username: who.email, name: who.name, role: "owner" });

    const mine = await me(res.body.access_token);
    expect(mine.status).toBe(200);
    expect(mine.body.id).toBe(res.body.user.id);

    const [user] = await server.db<{ password_hash: string | null }>("SELECT password_hash FROM users WHERE id = $1", [
      res.body.user.id,
    ]);
    expect(user.password_hash).toBeNull();
    expect(
      await count("SELECT count(*) AS n FROM credit_ledger WHERE team_id = $1 AND type = 'grant'", [
        res.body.user.team_id,
      ]),
    ).toBe(1);
    const identities = await server.db(
      "SELECT provider, subject, email, email_verified FROM oauth_identities WHERE user_id = $1",
      [res.body.user.id],
    );
    expect(identities).toEqual([{ provider: "acme", subject: who.sub, email: who.email, email_verified: true }]);
    // An OAuth-only account has no password to log in with.
    const login = await http(server.url, "POST", "/control/v1/auth/login", {
      body: { username: who.email, password: "correct horse battery" },
    });
    expect(login.status).toBe(401);
  });

  test("when the same person signs in again, then it is the same user and nothing new is created", async () => {
    const who = person();
    const first = await complete((await flow("acme", who)).body);
    expect(first.status).toBe(200);
    const before = await snapshot();
    // Without `iss`: the server fills in the provider's own issuer (the state is bound to it).
    const again = await complete((await flow("acme", who)).body);
    expect(again.status).toBe(200);
    expect(again.body.user.id).toBe(first.body.user.id);
    const after = await snapshot();
    expect(after).toEqual({ ...before, oauth_states: after.oauth_states });
  });

  test("when a state is used twice, then the second answer is 400 and changes nothing", async () => {
    const f = await flow("acme", person());
    expect((await complete(f.body)).status).toBe(200);
    const before = await snapshot();
    const again = await complete(f.body);
    expectInvalid(again, "state");
    expect(await snapshot()).toEqual(before);
  });

  test("when the state is unknown, then 400 and nothing changes", async () => {
    const f = await flow("acme", person());
    const before = await snapshot();
    expectInvalid(await complete({ ...f.body, state: randomBytes(32).toString("base64url") }), "state");
    expect(await snapshot()).toEqual(before);
    // The real state still works afterwards.
    expect((await complete(f.body)).status).toBe(200);
  });

  test("when the state has expired, then 400", async () => {
    const f = await flow("acme", person());
    await server.db("UPDATE oauth_states SET expires_at = now() - interval '1 second' WHERE state_hash = $1", [
      createHash("sha256").update(f.state).digest(),
    ]);
    expectInvalid(await complete(f.body), "state");
  });

  test("when the state was issued for another provider, then 400", async () => {
    const f = await flow("acme", person());
    expectInvalid(await complete({ ...f.body, provider: "other" }), "state");
  });

  test("when the code is wrong, then 400 from the provider's refusal, no user, and the state is spent", async () => {
    const who = person();
    const f = await flow("acme", who);
    const users = await count("SELECT count(*) AS n FROM users");
    const res = await complete({ ...f.body, code: f.code.slice(0, -2) + "xx" });
    expectInvalid(res, "code");
    expect(res.body.detail).toContain("invalid_grant");
    expect(await count("SELECT count(*) AS n FROM users")).toBe(users);
    expect(await count("SELECT count(*) AS n FROM oauth_identities WHERE subject = $1", [who.sub])).toBe(0);
    // Single use even when the exchange failed: the right code cannot follow with that state.
    expectInvalid(await complete(f.body), "state");
  });

  test("when the iss parameter names another issuer, then 400 (RFC 9207)", async () => {
    const f = await flow("acme", person());
    expectInvalid(await complete({ ...f.body, iss: other.issuer }), "code");
  });

  test("when a password account has the email and the provider verified it, then the identity is linked to that account", async () => {
    const user = await createTestUser(server.url);
    const who = person({ email: user.email.toUpperCase() });
    const res = await complete((await flow("acme", who)).body);
    expect(res.status).toBe(200);
    expect(res.body.user.id).toBe(user.userId);
    expect(res.body.user.team_id).toBe(user.teamId);
    const list = await linkedAccounts(user.token);
    expect(list.body.items).toEqual([
      { provider: "acme", subject: who.sub, email: user.email.toLowerCase(), created_at: expect.any(String) },
    ]);
  });

  test("when a password account has the email but the provider did not verify it, then 409 and nothing changes", async () => {
    const user = await createTestUser(server.url);
    const who = person({ email: user.email, email_verified: false });
    const f = await flow("acme", who);
    const before = await snapshot();
    const res = await complete(f.body);
    expectEnvelope(res, 409);
    expect(res.body.detail).toContain("link");
    expect(await snapshot()).toEqual({ ...before, oauth_states: before.oauth_states - 1 });
    expect((await linkedAccounts(user.token)).body.items).toEqual([]);
  });

  test("when the email is unknown and not verified, then 403 and no account is created", async () => {
    const who = person({ email_verified: false });
    const f = await flow("acme", who);
    const before = await snapshot();
    expectEnvelope(await complete(f.body), 403);
    expect(await snapshot()).toEqual({ ...before, oauth_states: before.oauth_states - 1 });
    expect(await count("SELECT count(*) AS n FROM users WHERE email = $1", [who.email])).toBe(0);
  });

  test("when the provider shares no email, then 403 and no account is created", async () => {
    const who = person({ email: undefined, email_verified: undefined });
    const f = await flow("acme", who);
    const users = await count("SELECT count(*) AS n FROM users");
    expectEnvelope(await complete(f.body), 403);
    expect(await count("SELECT count(*) AS n FROM users")).toBe(users);
  });

  test("when a first sign-in carries an invitation for that email, then the person joins the inviting team with its role and the token is used up", async () => {
    const owner = await createTestUser(server.url);
    const who = person();
    const invited = await invite(server.url, owner.token, who.email!, "admin");
    expect(invited.status).toBe(201);
    const teams = await count("SELECT count(*) AS n FROM teams");
    const res = await complete({ ...(await flow("acme", who)).body, invite_token: invited.body.invite_token });
    expect(res.status).toBe(200);
    expect(res.body.user).toMatchObject({ id: invited.body.user_id, team_id: owner.teamId, role: "admin" });
    // No personal team, no signup grant: the person joined an existing team.
    expect(await count("SELECT count(*) AS n FROM teams")).toBe(teams);
    expect(await count("SELECT count(*) AS n FROM oauth_identities WHERE user_id = $1", [res.body.user.id])).toBe(1);
    expect((await me(res.body.access_token)).body.team_id).toBe(owner.teamId);

    // The token is spent: a second person cannot use it.
    const again = await flow("acme", person());
    const before = await snapshot();
    expectEnvelope(await complete({ ...again.body, invite_token: invited.body.invite_token }), 404);
    expect(await snapshot()).toEqual({ ...before, oauth_states: before.oauth_states - 1 });
  });

  test("when a first sign-in carries an invitation for another email, then 403 and nothing is created", async () => {
    const owner = await createTestUser(server.url);
    const invited = await invite(server.url, owner.token, freshEmail());
    const who = person();
    const f = await flow("acme", who);
    const before = await snapshot();
    expectEnvelope(await complete({ ...f.body, invite_token: invited.body.invite_token }), 403);
    expect(await snapshot()).toEqual({ ...before, oauth_states: before.oauth_states - 1 });
  });

  test("when a first sign-in carries an unknown invitation, then 404 and nothing is created", async () => {
    const f = await flow("acme", person());
    const before = await snapshot();
    expectEnvelope(await complete({ ...f.body, invite_token: "inv_nope" }), 404);
    expect(await snapshot()).toEqual({ ...before, oauth_states: before.oauth_states - 1 });
  });

  test("when two first sign-ins of one person race, then both succeed as one user", async () => {
    const who = person();
    const [a, b] = [await flow("acme", who), await flow("acme", who)];
    const users = await count("SELECT count(*) AS n FROM users");
    const [ra, rb] = await Promise.all([complete(a.body), complete(b.body)]);
    expect(ra.status).toBe(200);
    expect(rb.status).toBe(200);
    expect(ra.body.user.id).toBe(rb.body.user.id);
    expect(await count("SELECT count(*) AS n FROM users")).toBe(users + 1);
    expect(await count("SELECT count(*) AS n FROM oauth_identities WHERE subject = $1", [who.sub])).toBe(1);
  });

  describe("flows the client ran itself", () => {
    /** The client's own code flow at `provider` (its own state and PKCE verifier, no nonce). */
    async function clientFlow(
      name: "acme" | "other",
      who: TestAccount,
      app?: { clientId: string; clientSecret: string },
    ) {
      const p = providerOf(name);
      const { clientId, clientSecret } = app ?? p;
      const config = await oidc.discovery(new URL(p.issuer), clientId, clientSecret, undefined, {
        execute: [oidc.allowInsecureRequests],
      });
      const verifier = oidc.randomPKCECodeVerifier();
      const state = oidc.randomState();
      const url = oidc.buildAuthorizationUrl(config, {
        redirect_uri: p.redirectUri,
        scope: "openid email profile",
        state,
        code_challenge: await oidc.calculatePKCECodeChallenge(verifier),
        code_challenge_method: "S256",
      });
      const back = await p.authorize(url.href, who);
      return { config, verifier, state, back };
    }

    test("when the client sends its code with its own code_verifier, then it signs in", async () => {
      const who = person();
      const { verifier, back } = await clientFlow("acme", who);
      const body = { provider: "acme", code: back.searchParams.get("code"), code_verifier: verifier };
      const res = await complete({ ...body, redirect_uri: acme.redirectUri, iss: back.searchParams.get("iss") });
      expect(res.status).toBe(200);
      expect(res.body.user.email).toBe(who.email);
    });

    test("when the code_verifier is not the flow's, then 400", async () => {
      const { back } = await clientFlow("acme", person());
      const res = await complete({
        provider: "acme",
        code: back.searchParams.get("code"),
        code_verifier: oidc.randomPKCECodeVerifier(),
      });
      expectInvalid(res, "code");
    });

    test("when the redirect_uri is not the configured one, then 400 before the provider is asked", async () => {
      const { verifier, back } = await clientFlow("acme", person());
      const code = back.searchParams.get("code");
      expectInvalid(
        await complete({
          provider: "acme",
          code,
          code_verifier: verifier,
          redirect_uri: "http://127.0.0.1:9/elsewhere",
        }),
        "redirect_uri",
      );
      // The code was not spent: it still signs in.
      expect((await complete({ provider: "acme", code, code_verifier: verifier })).status).toBe(200);
    });

    test("when the client sends an ID token it obtained, then it is verified against the provider's keys and signs in", async () => {
      const who = person();
      const { config, verifier, state, back } = await clientFlow("other", who);
      const tokens = await oidc.authorizationCodeGrant(config, back, {
        pkceCodeVerifier: verifier,
        expectedState: state,
      });
      const idToken = tokens.id_token as string;
      const res = await complete({ provider: "other", id_token: idToken, access_token: tokens.access_token });
      expect(res.status).toBe(200);
      expect(res.body.user.email).toBe(who.email);

      // The same token for the other provider: wrong issuer and audience.
      expectInvalid(await complete({ provider: "acme", id_token: idToken }), "id_token");
      // A token signed with a key that is not the provider's.
      const { privateKey } = await generateKeyPair("RS256");
      const forged = await new SignJWT({ email: who.email, email_verified: true })
        .setProtectedHeader({ alg: "RS256", kid: "test-key" })
        .setIssuer(other.issuer)
        .setAudience(other.clientId)
        .setSubject(who.sub)
        .setIssuedAt()
        .setExpirationTime("5m")
        .sign(privateKey);
      expectInvalid(await complete({ provider: "other", id_token: forged }), "id_token");
      // Signed with "none" or a symmetric key: refused too.
      const [header, payload] = forged.split(".");
      const none = `${Buffer.from(JSON.stringify({ alg: "none" })).toString("base64url")}.${payload}.`;
      expectInvalid(await complete({ provider: "other", id_token: none }), "id_token");
      expectInvalid(await complete({ provider: "other", id_token: `${header}.${payload}.AAAA` }), "id_token");
    });

    test("when the ID token was issued to another application of the same provider, then 400", async () => {
      const who = person();
      const { config, verifier, state, back } = await clientFlow("other", who, other.otherApp);
      const tokens = await oidc.authorizationCodeGrant(config, back, {
        pkceCodeVerifier: verifier,
        expectedState: state,
      });
      const users = await count("SELECT count(*) AS n FROM users");
      const res = await complete({ provider: "other", id_token: tokens.id_token });
      expectInvalid(res, "id_token");
      expect(res.body.extra[0].message).toContain("aud");
      expect(await count("SELECT count(*) AS n FROM users")).toBe(users);
    });

    test("when only an access token is sent, then 400: it does not prove who signed in", async () => {
      const res = await complete({ provider: "other", access_token: "anything" });
      expectInvalid(res, "code");
      expect(res.body.extra[0].message).toContain("access token");
    });
  });

  test("when the input is bad, then 400 naming the field and nothing changes", async () => {
    const f = await flow("acme", person());
    const verifier = oidc.randomPKCECodeVerifier();
    const cases: Array<[unknown, string]> = [
      [{}, "provider"],
      [{ provider: 5, code: f.code, state: f.state }, "provider"],
      [{ provider: "acme" }, "code"],
      [{ provider: "acme", code: f.code }, "state"],
      [{ provider: "acme", code: 12, state: f.state }, "code"],
      [{ provider: "acme", code: f.code, state: ["x"] }, "state"],
      [{ provider: "acme", code: f.code, state: f.state, code_verifier: verifier }, "code_verifier"],
      [{ provider: "acme", code: f.code, code_verifier: "short" }, "code_verifier"],
      [{ provider: "acme", code: f.code, state: f.state, redirect_uri: "not a url" }, "redirect_uri"],
      [{ provider: "acme", code: f.code, state: f.state, iss: 7 }, "iss"],
      [{ provider: "acme", code: f.code, id_token: "a.b.c" }, "id_token"],
      [{ provider: "acme", code: "a\u0000b", state: f.state }, "code"],
      [{ provider: "nope", code: f.code, state: f.state }, "provider"],
      [{ provider: "acme", code: f.code, state: f.state, invite_token: 3 }, "invite_token"],
      [[], "body"],
      [{ provider: null, code: f.code, state: f.state }, "provider"],
    ];
    const before = await snapshot();
    for (const [body, field] of cases) {
      const res = await complete(body);
      try {
        expectInvalid(res, field);
      } catch (err) {
        throw new Error(`${JSON.stringify(body)} → ${res.status} ${res.text}: ${String(err)}`);
      }
    }
    expect(await snapshot()).toEqual(before);
    // The flow was left untouched by all of that.
    expect((await complete(f.body)).status).toBe(200);
  });
});

describe("POST /control/v1/auth/link-oauth", () => {
  test("when a signed-in user links an identity, then it is listed and signs in to that user from then on", async () => {
    const user = await createTestUser(server.url);
    const who = person({ email: `someone-else-${seq}@example.org` });
    const f = await flow("acme", who, user.token);
    const res = await link(user.token, f.body);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      message: "Linked successfully.",
      provider: "acme",
      subject: who.sub,
      email: who.email,
      created_at: expect.any(String),
    });
    expect(new Date(res.body.created_at).toISOString()).toBe(res.body.created_at);

    const list = await linkedAccounts(user.token);
    expect(list.status).toBe(200);
    expect(list.body).toEqual({
      items: [{ provider: "acme", subject: who.sub, email: who.email, created_at: res.body.created_at }],
    });

    // Signing in with that identity is signing in as the user (not a new account for its email).
    const signIn = await complete((await flow("acme", who)).body);
    expect(signIn.status).toBe(200);
    expect(signIn.body.user.id).toBe(user.userId);
    expect(await count("SELECT count(*) AS n FROM users WHERE email = $1", [who.email])).toBe(0);

    // Linking it again is answered with the existing link.
    const again = await link(user.token, (await flow("acme", who, user.token)).body);
    expect(again.status).toBe(200);
    expect(again.body.created_at).toBe(res.body.created_at);
    expect((await linkedAccounts(user.token)).body.items).toHaveLength(1);
  });

  test("when the identity is linked to another user, then 409 and nothing changes", async () => {
    const owner = await createTestUser(server.url);
    const intruder = await createTestUser(server.url);
    const who = person();
    expect((await link(owner.token, (await flow("acme", who, owner.token)).body)).status).toBe(200);
    const f = await flow("acme", who, intruder.token);
    const before = await snapshot();
    expectEnvelope(await link(intruder.token, f.body), 409);
    expect(await snapshot()).toEqual({ ...before, oauth_states: before.oauth_states - 1 });
    expect((await linkedAccounts(intruder.token)).body.items).toEqual([]);
    expect((await linkedAccounts(owner.token)).body.items).toHaveLength(1);
  });

  test("when the state was not issued to the signed-in user, then 400 (an anonymous or another user's flow cannot link)", async () => {
    const user = await createTestUser(server.url);
    const someoneElse = await createTestUser(server.url);
    const who = person();
    expectInvalid(await link(user.token, (await flow("acme", who)).body), "state");
    expectInvalid(await link(user.token, (await flow("acme", who, someoneElse.token)).body), "state");
    expect(await count("SELECT count(*) AS n FROM oauth_identities WHERE subject = $1", [who.sub])).toBe(0);
  });

  test("when a user links identities of both providers, then both are listed, oldest first", async () => {
    const user = await createTestUser(server.url);
    const a = person();
    expect((await link(user.token, (await flow("acme", a, user.token)).body)).status).toBe(200);
    const b = person();
    expect((await link(user.token, (await flow("other", b, user.token)).body)).status).toBe(200);
    const items = (await linkedAccounts(user.token)).body.items;
    expect(items.map((i: { provider: string; subject: string }) => [i.provider, i.subject])).toEqual([
      ["acme", a.sub],
      ["other", b.sub],
    ]);
  });

  test("when unauthenticated, then 401; with an API key, then 403; nothing changes", async () => {
    const user = await createTestUser(server.url);
    const key = await createTestApiKey(server.url, user.token);
    const f = await flow("acme", person(), user.token);
    const before = await snapshot();
    expectEnvelope(await link(undefined, f.body), 401);
    expectEnvelope(await link("forged.token.value", f.body), 401);
    expectEnvelope(await link(key.key, f.body), 403);
    expect(await snapshot()).toEqual(before);
    // The state survived: the session itself may still link.
    expect((await link(user.token, f.body)).status).toBe(200);
  });

  test("when the input is bad, then 400 naming the field and nothing changes", async () => {
    const user = await createTestUser(server.url);
    const f = await flow("acme", person(), user.token);
    const before = await snapshot();
    for (const [body, field] of [
      [{}, "provider"],
      [{ provider: "acme", code: f.code }, "state"],
      [{ provider: "acme", code: f.code, state: 1 }, "state"],
      [{ provider: "zzz", code: f.code, state: f.state }, "provider"],
      [{ provider: "acme", access_token: "x" }, "code"],
    ] as Array<[unknown, string]>) {
      expectInvalid(await link(user.token, body), field);
    }
    expect(await snapshot()).toEqual(before);
  });
});

describe("GET /control/v1/auth/linked-accounts", () => {
  test("when the user has linked nothing, then an empty list; another user's identities never show", async () => {
    const user = await createTestUser(server.url);
    const res = await linkedAccounts(user.token);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ items: [] });
    // Every identity in the database belongs to someone else: none is listed.
    expect(await count("SELECT count(*) AS n FROM oauth_identities")).toBeGreaterThan(0);
  });

  test("when unauthenticated, then 401", async () => {
    expectEnvelope(await linkedAccounts(), 401);
    expectEnvelope(await linkedAccounts("nope"), 401);
  });
});

describe("GraphQL", () => {
  async function gql(query: string, variables?: Record<string, unknown>, token?: string) {
    const res = await http(server.url, "POST", "/graphql", { body: { query, variables }, token });
    return res.body as { data: any; errors?: Array<{ message: string; extensions: Record<string, any> }> };
  }

  test("when a client signs in, links and lists through GraphQL, then it answers as REST does", async () => {
    const who = person();
    const started = await gql(
      `mutation($p: String!) { oauthAuthorize(provider: $p) { provider authorizationUrl state expiresAt } }`,
      { p: "acme" },
    );
    expect(started.errors).toBeUndefined();
    const back = await acme.authorize(started.data.oauthAuthorize.authorizationUrl, who);
    const signedIn = await gql(
      `mutation($i: OAuthCompleteInput!) { oauthComplete(input: $i) { accessToken tokenType user { id email } } }`,
      { i: { provider: "acme", code: back.searchParams.get("code"), state: back.searchParams.get("state") } },
    );
    expect(signedIn.errors).toBeUndefined();
    expect(signedIn.data.oauthComplete.user.email).toBe(who.email);
    const token = signedIn.data.oauthComplete.accessToken;

    const second = person();
    const start2 = await gql(`mutation { oauthAuthorize(provider: "other") { authorizationUrl } }`, undefined, token);
    const back2 = await other.authorize(start2.data.oauthAuthorize.authorizationUrl, second);
    const linked = await gql(
      `mutation($i: OAuthCompleteInput!) { linkOAuth(input: $i) { message provider subject email createdAt } }`,
      { i: { provider: "other", code: back2.searchParams.get("code"), state: back2.searchParams.get("state") } },
      token,
    );
    expect(linked.errors).toBeUndefined();
    expect(linked.data.linkOAuth).toMatchObject({
      message: "Linked successfully.",
      provider: "other",
      subject: second.sub,
    });

    const list = await gql(`{ linkedAccounts { items { provider subject email createdAt } } }`, undefined, token);
    expect(list.data.linkedAccounts.items.map((i: { subject: string }) => i.subject)).toEqual([who.sub, second.sub]);
  });

  test("when the input is bad or the caller unknown, then the same codes as REST", async () => {
    const bad = await gql(`mutation { oauthComplete(input: { provider: "acme", code: "x" }) { accessToken } }`);
    expect(bad.errors?.[0].extensions).toMatchObject({ code: "INVALID_REQUEST", status_code: 400 });
    expect(bad.errors?.[0].extensions.extra.map((i: { field: string }) => i.field)).toContain("state");
    const unknown = await gql(`mutation { oauthAuthorize(provider: "nope") { state } }`);
    expect(unknown.errors?.[0].extensions.status_code).toBe(404);
    const anonymous = await gql(`{ linkedAccounts { items { provider } } }`);
    expect(anonymous.errors?.[0].extensions.status_code).toBe(401);
    const anonymousLink = await gql(
      `mutation { linkOAuth(input: { provider: "acme", code: "x", state: "y" }) { provider } }`,
    );
    expect(anonymousLink.errors?.[0].extensions.status_code).toBe(401);
  });
});
