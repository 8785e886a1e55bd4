/**
 * Password reset and sign-in throttling (issue 8, items 1 and 5; DESIGN §3 Account schemas,
 * Credentials, Errors), end to end: a real SMTP server (`smtp-server` on loopback) receives the
 * mail Switchyard sends through `SMTP_URL`; requests go over real HTTP from distinct loopback
 * addresses (127.0.0.x), so each test has client addresses of its own for the per-address
 * counters. A second API process on the same database checks what must hold across processes.
 */
import { createHash, randomBytes, randomUUID } from "node:crypto";
import nodeHttp from "node:http";
import type { AddressInfo } from "node:net";
import { createClient } from "graphql-ws";
import { SignJWT, decodeJwt } from "jose";
import { SMTPServer } from "smtp-server";
import WebSocket from "ws";
import {
  type TestServer,
  type TestUser,
  createTestApiKey,
  createTestUser,
  eventually,
  expectEnvelope,
  expectInvalid,
  startTestServer,
} from "./support/harness.js";
import { captureLogs } from "./support/log-capture.js";

const FORGOT = "/control/v1/auth/forgot-password";
const RESET = "/control/v1/auth/reset-password";
const LOGIN = "/control/v1/auth/login";
const ME = "/control/v1/auth/me";
const FORGOT_MESSAGE = "If that email exists, a reset link was sent.";
const RESET_MESSAGE = "Password has been reset.";
const RESET_URL = "https://app.example.test/reset-password";
const NEW_PASSWORD = "a brand new passphrase";
const LIMIT = 10;
/** The harness's access-token secret (to sign tokens with chosen issue times). */
const JWT_SECRET = "test-secret-test-secret-test-secret-0123";

// ---------------------------------------------------------------------------------------------
// A real SMTP server

interface Mail {
  to: string[];
  subject: string;
  text: string;
}

const inbox: Mail[] = [];

/** Headers and decoded body of a raw RFC 5322 message (7bit, quoted-printable or base64 text). */
function parseMail(raw: string, to: string[]): Mail {
  const split = raw.indexOf("\r\n\r\n");
  const head = raw.slice(0, split).replace(/\r\n[ \t]+/g, " ");
  const body = raw.slice(split + 4);
  const header = (name: string) => new RegExp(`^${name}:\\s*(.*)$`, "im").exec(head)?.[1]?.trim() ?? "";
  const encoding = header("Content-Transfer-Encoding").toLowerCase();
  let text = body;
  if (encoding === "quoted-printable") {
    const joined = body.replace(/=\r?\n/g, "");
    const bytes: number[] = [];
    for (let i = 0; i < joined.length; i++) {
      const hex = joined.slice(i + 1, i + 3);
      if (joined[i] === "=" && /^[0-9A-F]{2}$/i.test(hex)) {
        bytes.push(parseInt(hex, 16));
        i += 2;
      } else bytes.push(joined.charCodeAt(i));
    }
    text = Buffer.from(bytes).toString("utf8");
  } else if (encoding === "base64") {
    text = Buffer.from(body, "base64").toString("utf8");
  }
  return { to, subject: header("Subject"), text: text.replace(/\r\n/g, "\n") };
}

const smtp = new SMTPServer({
  authOptional: true,
  disabledCommands: ["STARTTLS", "AUTH"],
  logger: false,
  onData(stream, session, callback) {
    const chunks: Buffer[] = [];
    stream.on("data", (c: Buffer) => chunks.push(c));
    stream.on("end", () => {
      const to = session.envelope.rcptTo.map((r) => r.address.toLowerCase());
      inbox.push(parseMail(Buffer.concat(chunks).toString("utf8"), to));
      callback();
    });
  },
});

function mailsTo(email: string): Mail[] {
  return inbox.filter((m) => m.to.includes(email.toLowerCase()));
}

/** Waits until `count` mails to `email` have arrived; returns the newest. */
async function awaitMail(email: string, count = 1): Promise<Mail> {
  const arrived = await eventually(async () => mailsTo(email).length >= count, 10_000);
  if (!arrived) throw new Error(`no mail #${count} to ${email} (have ${mailsTo(email).length})`);
  return mailsTo(email).at(-1)!;
}

/** The token of a reset mail: the link's `token` and the bare token line must agree. */
function tokenOf(mail: Mail): string {
  const link = new RegExp(`^${RESET_URL.replace(/[.?]/g, "\\$&")}\\?token=([A-Za-z0-9_-]+)$`, "m").exec(mail.text);
  expect(link).not.toBeNull();
  const token = link![1];
  expect(mail.text.split("\n")).toContain(token);
  return token;
}

// ---------------------------------------------------------------------------------------------
// HTTP from chosen loopback addresses

let addressSeq = 0;
/** A loopback address (127.0.x.y) no other request used: a client of its own for the per-address counters. */
function freshAddress(): string {
  addressSeq++;
  return `127.0.${Math.floor(addressSeq / 250) + 1}.${(addressSeq % 250) + 2}`;
}

interface Answer {
  status: number;
  body: any;
  headers: nodeHttp.IncomingHttpHeaders;
}

/** One request over a new connection from `from` (default 127.0.0.1). */
function call(
  base: string,
  method: string,
  path: string,
  opts: { body?: unknown; token?: string; from?: string; headers?: Record<string, string> } = {},
): Promise<Answer> {
  const url = new URL(base + path);
  const headers: Record<string, string> = { ...opts.headers };
  if (opts.token) headers.authorization = `Bearer ${opts.token}`;
  const payload =
    opts.body === undefined ? undefined : typeof opts.body === "string" ? opts.body : JSON.stringify(opts.body);
  if (payload !== undefined) headers["content-type"] ??= "application/json";
  return new Promise((resolve, reject) => {
    const req = nodeHttp.request(
      {
        host: url.hostname,
        port: url.port,
        path: url.pathname + url.search,
        method,
        headers,
        localAddress: opts.from ?? "127.0.0.1",
        agent: false,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => {
          const text = Buffer.concat(chunks).toString("utf8");
          let body: unknown = text;
          try {
            body = text ? JSON.parse(text) : undefined;
          } catch {
            /* not JSON */
          }
          resolve({ status: res.statusCode!, body, headers: res.headers });
        });
      },
    );
    req.on("error", reject);
    req.end(payload);
  });
}

let server: TestServer;
const logs = captureLogs("info");

const forgot = (body: unknown, from = freshAddress(), headers?: Record<string, string>) =>
  call(server.url, "POST", FORGOT, { body, from, headers });
const reset = (body: unknown) => call(server.url, "POST", RESET, { body });
const login = (username: string, password: string, from = freshAddress(), base = server.url) =>
  call(base, "POST", LOGIN, { body: { username, password }, from });
const me = (token: string, base = server.url) => call(base, "GET", ME, { token });

async function gql(query: string, variables: Record<string, unknown>, from = freshAddress(), token?: string) {
  const res = await call(server.url, "POST", "/graphql", { body: { query, variables }, from, token });
  return res.body as { data: any; errors?: Array<{ message: string; extensions: Record<string, any> }> };
}

/** Asks for a reset mail for `user` and returns the mailed token. */
async function mailedToken(user: TestUser): Promise<string> {
  const before = mailsTo(user.email).length;
  const res = await forgot({ email: user.email });
  expect(res.status).toBe(200);
  return tokenOf(await awaitMail(user.email, before + 1));
}

const sha256 = (text: string) => createHash("sha256").update(text).digest();

beforeAll(async () => {
  await new Promise<void>((resolve) => smtp.listen(0, "127.0.0.1", resolve));
  const port = (smtp.server.address() as AddressInfo).port;
  server = await startTestServer({ smtpUrl: `smtp://127.0.0.1:${port}`, passwordResetUrl: RESET_URL }, undefined, {
    logger: logs.logger,
  });
}, 60_000);
afterAll(async () => {
  await server?.close();
  await new Promise<void>((resolve) => smtp.close(() => resolve()));
});

// ---------------------------------------------------------------------------------------------

describe("password reset through a real SMTP server", () => {
  test("when a registered user asks, then a mail with a configured link arrives and its token resets the password, voiding older sessions but not API keys", async () => {
    const user = await createTestUser(server.url);
    const key = await createTestApiKey(server.url, user.token);
    const loggedIn = await login(user.email, user.password);
    expect(loggedIn.status).toBe(200);
    const sessions = [user.token, loggedIn.body.access_token as string];
    for (const token of sessions) expect((await me(token)).status).toBe(200);

    // The link comes from configuration, never from the Host header.
    const asked = await forgot({ email: user.email }, freshAddress(), { host: "evil.example" });
    expect(asked.status).toBe(200);
    expect(asked.body).toEqual({ message: FORGOT_MESSAGE });
    const mail = await awaitMail(user.email);
    expect(mail.to).toEqual([user.email]);
    expect(mail.subject).toBe("Reset your Switchyard password");
    expect(mail.text).not.toContain("evil.example");
    const token = tokenOf(mail);
    expect(Buffer.from(token, "base64url").length).toBeGreaterThanOrEqual(16); // ≥ 128 bits

    // Only the token's hash is kept: in the tokens table, and the outbox dropped the body once sent.
    const [row] = await server.db<any>(
      `SELECT token_hash, extract(epoch FROM expires_at - created_at) AS ttl_s, used_at
         FROM password_reset_tokens WHERE user_id = $1`,
      [user.userId],
    );
    expect(Buffer.compare(row.token_hash, sha256(token))).toBe(0);
    expect(Number(row.ttl_s)).toBe(30 * 60);
    expect(row.used_at).toBeNull();
    expect(
      await eventually(async () => {
        const [out] = await server.db<any>(`SELECT kind, sent_at, body_text FROM mail_outbox WHERE to_address = $1`, [
          user.email,
        ]);
        return out.kind === "password_reset" && out.sent_at !== null && !out.body_text.includes(token);
      }, 5_000),
    ).toBe(true);

    const done = await reset({ token, password: NEW_PASSWORD });
    expect(done.status).toBe(200);
    expect(done.body).toEqual({ message: RESET_MESSAGE });

    // Every access token issued before the reset is void, on both planes; the API key is not.
    for (const token of sessions) {
      expectEnvelope(await me(token), 401);
      expectEnvelope(await call(server.url, "GET", "/v1/auth/me", { token }), 401);
    }
    expect((await call(server.url, "GET", "/v1/auth/me", { token: key.key })).status).toBe(200);

    // The new password works at once (a login in the same second as the reset), the old one not.
    expectEnvelope(await login(user.email, user.password), 401);
    const fresh = await login(user.email, NEW_PASSWORD);
    expect(fresh.status).toBe(200);
    expect((await me(fresh.body.access_token)).status).toBe(200);
    const [stored] = await server.db<any>("SELECT password_hash FROM users WHERE id = $1", [user.userId]);
    const params = /^\$argon2id\$v=19\$([^$]+)\$/.exec(stored.password_hash)?.[1].split(",").sort();
    expect(params).toEqual(["m=19456", "p=1", "t=2"]);

    // The token works once.
    expectInvalid(await reset({ token, password: "yet another passphrase" }), "token");
    expect((await login(user.email, NEW_PASSWORD)).status).toBe(200);
  }, 60_000);

  test("when tokens were issued a few milliseconds before and after the reset, then the one before is refused and the one after accepted", async () => {
    const user = await createTestUser(server.url);
    const token = await mailedToken(user);
    expect((await reset({ token, password: NEW_PASSWORD })).status).toBe(200);
    const [row] = await server.db<{ t: string }>(
      "SELECT extract(epoch FROM tokens_valid_after)::text AS t FROM users WHERE id = $1",
      [user.userId],
    );
    const cutoff = Number(row.t);
    const signedAt = (iat: number) =>
      new SignJWT({ tid: user.teamId })
        .setProtectedHeader({ alg: "HS256", typ: "JWT" })
        .setSubject(user.userId)
        .setIssuer("switchyard")
        .setIssuedAt(iat)
        .setJti(randomUUID())
        .setExpirationTime("1h")
        .sign(new TextEncoder().encode(JWT_SECRET));
    expectEnvelope(await me(await signedAt(cutoff - 0.002)), 401);
    expect((await me(await signedAt(cutoff + 0.002))).status).toBe(200);
  }, 60_000);

  test("when a token is issued, then its issue time carries milliseconds", async () => {
    const user = await createTestUser(server.url);
    const before = Date.now();
    const res = await login(user.email, user.password);
    const after = Date.now();
    const iat = decodeJwt(res.body.access_token).iat!;
    expect(iat * 1000).toBeGreaterThanOrEqual(before);
    expect(iat * 1000).toBeLessThanOrEqual(after);
  }, 60_000);

  test("when two reset mails are open and one is used, then the other is spent too", async () => {
    const user = await createTestUser(server.url);
    const first = await mailedToken(user);
    const second = await mailedToken(user);
    expect(second).not.toBe(first);
    expect((await reset({ token: second, password: NEW_PASSWORD })).status).toBe(200);
    expectInvalid(await reset({ token: first, password: "yet another passphrase" }), "token");
    expect((await login(user.email, NEW_PASSWORD)).status).toBe(200);
  }, 60_000);

  test("when the token has expired, then 400 naming token and nothing changes", async () => {
    const user = await createTestUser(server.url);
    const token = await mailedToken(user);
    await server.db("UPDATE password_reset_tokens SET expires_at = now() - interval '1 second' WHERE user_id = $1", [
      user.userId,
    ]);
    const before = await server.db<any>("SELECT password_hash, tokens_valid_after FROM users WHERE id = $1", [
      user.userId,
    ]);
    expectInvalid(await reset({ token, password: NEW_PASSWORD }), "token");
    expect(await server.db("SELECT password_hash, tokens_valid_after FROM users WHERE id = $1", [user.userId])).toEqual(
      before,
    );
    expect((await me(user.token)).status).toBe(200);
    expect((await login(user.email, user.password)).status).toBe(200);
  }, 60_000);

  test("when the token is forged, then 400 naming token and nothing changes", async () => {
    const user = await createTestUser(server.url);
    const token = await mailedToken(user);
    const flipped = token.slice(0, -1) + (token.endsWith("A") ? "B" : "A");
    for (const forged of [randomBytes(32).toString("base64url"), flipped, token + "x", "x"]) {
      expectInvalid(await reset({ token: forged, password: NEW_PASSWORD }), "token");
    }
    expect((await login(user.email, user.password)).status).toBe(200);
    expect((await me(user.token)).status).toBe(200);
    // The real token is still good.
    expect((await reset({ token, password: NEW_PASSWORD })).status).toBe(200);
  }, 60_000);

  test("when the email is unknown, then the same answer as for a known one and no mail", async () => {
    const user = await createTestUser(server.url);
    const unknown = `nobody-${randomBytes(4).toString("hex")}@example.com`;
    const a = await forgot({ email: unknown });
    const b = await forgot({ email: user.email });
    expect(a.status).toBe(b.status);
    expect(a.body).toEqual(b.body);
    expect(a.headers["content-type"]).toBe(b.headers["content-type"]);
    expect(a.headers["content-length"]).toBe(b.headers["content-length"]);
    await awaitMail(user.email);
    expect(mailsTo(unknown)).toHaveLength(0);
    expect(await server.db("SELECT 1 FROM mail_outbox WHERE to_address = $1", [unknown])).toHaveLength(0);
  }, 60_000);

  test("when the email differs in case or spacing, then the mail goes to the stored address", async () => {
    const user = await createTestUser(server.url);
    expect((await forgot({ email: `  ${user.email.toUpperCase()} ` })).status).toBe(200);
    expect((await awaitMail(user.email)).to).toEqual([user.email]);
  }, 60_000);

  test("when the account is inactive, then the same answer and no mail", async () => {
    const user = await createTestUser(server.url);
    await server.db("UPDATE users SET is_active = false WHERE id = $1", [user.userId]);
    const res = await forgot({ email: user.email });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ message: FORGOT_MESSAGE });
    const other = await createTestUser(server.url);
    await forgot({ email: other.email });
    await awaitMail(other.email);
    expect(mailsTo(user.email)).toHaveLength(0);
  }, 60_000);

  test("when the same token is used twice at once, then exactly one reset succeeds", async () => {
    const user = await createTestUser(server.url);
    const token = await mailedToken(user);
    const answers = await Promise.all([
      reset({ token, password: "first parallel pass" }),
      reset({ token, password: "second parallel pass" }),
    ]);
    expect(answers.map((a) => a.status).sort()).toEqual([200, 400]);
  }, 60_000);
});

describe("bad input", () => {
  async function snapshot(userId: string) {
    const [row] = await server.db(
      `SELECT
        (SELECT password_hash FROM users WHERE id = $1) AS password_hash,
        (SELECT tokens_valid_after FROM users WHERE id = $1) AS valid_after,
        (SELECT count(*) FROM password_reset_tokens)::int AS tokens,
        (SELECT count(*) FROM password_reset_tokens WHERE used_at IS NOT NULL)::int AS used,
        (SELECT count(*) FROM mail_outbox)::int AS mails,
        (SELECT coalesce(sum(hits), 0) FROM auth_throttle)::int AS hits`,
      [userId],
    );
    return row;
  }

  test("when forgot-password gets no valid email, then 400 naming email and nothing is stored or counted", async () => {
    const user = await createTestUser(server.url);
    const before = await snapshot(user.userId);
    for (const body of [{}, { email: 5 }, { email: "not-an-email" }, { email: "" }, { email: "a\u0000@example.com" }]) {
      expectInvalid(await forgot(body), "email");
    }
    for (const body of ["[]", "null", '"x@example.com"']) expectEnvelope(await forgot(body), 400);
    expectEnvelope(await forgot("{"), 400);
    expect(await snapshot(user.userId)).toEqual(before);
  }, 60_000);

  test("when reset-password gets bad input, then 400 naming the field, the token stays good and nothing changes", async () => {
    const user = await createTestUser(server.url);
    const token = await mailedToken(user);
    const before = await snapshot(user.userId);
    expectInvalid(await reset({ password: NEW_PASSWORD }), "token");
    expectInvalid(await reset({ token: 5, password: NEW_PASSWORD }), "token");
    expectInvalid(await reset({ token: "", password: NEW_PASSWORD }), "token");
    expectInvalid(await reset({ token: "a\u0000b", password: NEW_PASSWORD }), "token");
    expectInvalid(await reset({ token }), "password");
    expectInvalid(await reset({ token, password: "short" }), "password");
    expectInvalid(await reset({ token, password: "x".repeat(129) }), "password");
    expectInvalid(await reset({ token, password: 12345678 }), "password");
    expectEnvelope(await reset("[]"), 400);
    expect(await snapshot(user.userId)).toEqual(before);
    expect((await me(user.token)).status).toBe(200);
    expect((await reset({ token, password: NEW_PASSWORD })).status).toBe(200);
  }, 60_000);

  test("when these endpoints get credentials, bad or good, then they ignore them (no 401: none needs a caller)", async () => {
    const res = await call(server.url, "POST", FORGOT, {
      body: { email: "someone@example.com" },
      token: "not.a.token",
      from: freshAddress(),
    });
    expect(res.status).toBe(200);
    expectInvalid(
      await call(server.url, "POST", RESET, { body: { token: "x", password: NEW_PASSWORD }, token: "garbage" }),
      "token",
    );
  });
});

describe("throttling", () => {
  function expect429(res: Answer): void {
    expectEnvelope(res, 429);
    const retryAfter = Number(res.headers["retry-after"]);
    expect(Number.isInteger(retryAfter)).toBe(true);
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(60);
    expect(res.body.extra).toEqual({ retry_after_s: retryAfter });
  }

  test("when one email is asked for too often, from any addresses, then 429 with Retry-After and no more mail", async () => {
    const user = await createTestUser(server.url);
    for (let i = 0; i < LIMIT; i++) expect((await forgot({ email: user.email })).status).toBe(200);
    expect429(await forgot({ email: user.email }));
    expect429(await forgot({ email: user.email.toUpperCase() }));
    await awaitMail(user.email, LIMIT);
    expect(await server.db("SELECT 1 FROM mail_outbox WHERE to_address = $1", [user.email])).toHaveLength(LIMIT);
    // Unknown emails are counted alike: a 429 tells nothing about who is registered.
    const unknown = `nobody-${randomBytes(4).toString("hex")}@example.com`;
    for (let i = 0; i < LIMIT; i++) expect((await forgot({ email: unknown })).status).toBe(200);
    expect429(await forgot({ email: unknown }));
  }, 60_000);

  test("when one address asks too often, for any emails, then 429; another address is still served", async () => {
    const from = freshAddress();
    for (let i = 0; i < LIMIT; i++) {
      expect((await forgot({ email: `x${i}-${randomBytes(3).toString("hex")}@example.com` }, from)).status).toBe(200);
    }
    expect429(await forgot({ email: "one-more@example.com" }, from));
    expect((await forgot({ email: "one-more@example.com" })).status).toBe(200);
  }, 60_000);

  test("when an account has too many failed logins, then even the right password gets 429 until the window passes", async () => {
    const user = await createTestUser(server.url);
    for (let i = 0; i < LIMIT; i++) expectEnvelope(await login(user.email, "wrong password"), 401);
    expect429(await login(user.email, user.password));
    expect429(await login(` ${user.email.toUpperCase()}`, user.password));
    // Another account from the same kind of fresh address is unaffected.
    const other = await createTestUser(server.url);
    expect((await login(other.email, other.password)).status).toBe(200);
    // The window ends (moved into the past here rather than waited for): the account is served again.
    await server.db("UPDATE auth_throttle SET window_start = window_start - interval '61 seconds'");
    expect((await login(user.email, user.password)).status).toBe(200);
  }, 60_000);

  test("when one address fails too often, on any accounts, then 429 there; other addresses log in", async () => {
    const user = await createTestUser(server.url);
    const from = freshAddress();
    for (let i = 0; i < LIMIT; i++) {
      expectEnvelope(
        await login(`guess${i}-${randomBytes(3).toString("hex")}@example.com`, "wrong password", from),
        401,
      );
    }
    expect429(await login(user.email, user.password, from));
    expect((await login(user.email, user.password)).status).toBe(200);
  }, 60_000);

  test("when logins succeed, then they do not count", async () => {
    const user = await createTestUser(server.url);
    const from = freshAddress();
    for (let i = 0; i < LIMIT + 3; i++) expect((await login(user.email, user.password, from)).status).toBe(200);
    expectEnvelope(await login(user.email, "wrong password", from), 401);
  }, 60_000);

  test("when many wrong passwords arrive at once, then no more than the limit are checked", async () => {
    const user = await createTestUser(server.url);
    const from = freshAddress();
    const mark = logs.lines.length;
    const answers = await Promise.all(
      Array.from({ length: LIMIT + 15 }, () => login(user.email, "wrong password", from)),
    );
    const statuses = answers.map((a) => a.status);
    expect(statuses.filter((s) => s === 401)).toHaveLength(LIMIT);
    expect(statuses.filter((s) => s === 429)).toHaveLength(15);
    // Each refused password check logs one line: only LIMIT passwords were checked at all.
    const failures = logs.records(mark).filter((r) => r.msg === "login failed" && r.userId === user.userId);
    expect(failures).toHaveLength(LIMIT);
    expect(failures[0].ip).toBe(from);
    expect(JSON.stringify(failures)).not.toContain(user.email);
  }, 60_000);

  test("when X-Forwarded-For is sent but no proxy is trusted, then it is ignored", async () => {
    const from = freshAddress();
    for (let i = 0; i < LIMIT; i++) {
      const res = await forgot({ email: `xff${i}@example.com` }, from, { "x-forwarded-for": `198.51.100.${i}` });
      expect(res.status).toBe(200);
    }
    expect429(await forgot({ email: "xff-last@example.com" }, from, { "x-forwarded-for": "198.51.100.99" }));
  }, 60_000);
});

describe("GraphQL", () => {
  const FORGOT_GQL = "mutation ($email: String!) { forgotPassword(email: $email) { message } }";
  const RESET_GQL =
    "mutation ($token: String!, $password: String!) { resetPassword(token: $token, password: $password) { message } }";
  const ME_GQL = "query { me { id } }";

  test("when forgotPassword and resetPassword run, then the mailed token resets the password and older sessions get 401", async () => {
    const user = await createTestUser(server.url);
    const asked = await gql(FORGOT_GQL, { email: user.email });
    expect(asked).toEqual({ data: { forgotPassword: { message: FORGOT_MESSAGE } } });
    const token = tokenOf(await awaitMail(user.email));

    expect((await gql(ME_GQL, {}, undefined, user.token)).data.me.id).toBe(user.userId);
    const done = await gql(RESET_GQL, { token, password: NEW_PASSWORD });
    expect(done).toEqual({ data: { resetPassword: { message: RESET_MESSAGE } } });
    const stale = await gql(ME_GQL, {}, undefined, user.token);
    expect(stale.errors?.[0].extensions.status_code).toBe(401);
    expect((await login(user.email, NEW_PASSWORD)).status).toBe(200);

    const again = await gql(RESET_GQL, { token, password: NEW_PASSWORD });
    expect(again.errors?.[0].extensions).toEqual(
      expect.objectContaining({ status_code: 400, extra: [expect.objectContaining({ field: "token" })] }),
    );
  }, 60_000);

  test("when the input is bad, then status_code 400 naming the field, as over REST", async () => {
    const badEmail = await gql(FORGOT_GQL, { email: "not-an-email" });
    expect(badEmail.errors?.[0].extensions).toEqual(
      expect.objectContaining({ status_code: 400, extra: [expect.objectContaining({ field: "email" })] }),
    );
    const badPassword = await gql(RESET_GQL, { token: "x", password: "short" });
    expect(badPassword.errors?.[0].extensions.status_code).toBe(400);
    expect(badPassword.errors?.[0].extensions.extra.map((i: { field: string }) => i.field)).toContain("password");
    const wrongType = await gql(FORGOT_GQL, { email: 5 });
    expect(wrongType.errors?.[0].extensions.status_code).toBe(400);
  });

  test("when a stale token comes along, then both mutations still run (they need no caller)", async () => {
    const asked = await gql(FORGOT_GQL, { email: "whoever@example.com" }, freshAddress(), "stale.token.here");
    expect(asked.data.forgotPassword.message).toBe(FORGOT_MESSAGE);
  });

  test("when forgotPassword is called too often, then status_code 429 with retry_after_s", async () => {
    const from = freshAddress();
    for (let i = 0; i < LIMIT; i++) {
      expect((await gql(FORGOT_GQL, { email: `g${i}@example.com` }, from)).errors).toBeUndefined();
    }
    const refused = await gql(FORGOT_GQL, { email: "g-last@example.com" }, from);
    expect(refused.errors?.[0].extensions).toEqual(
      expect.objectContaining({ code: "RATE_LIMITED", status_code: 429, extra: { retry_after_s: expect.any(Number) } }),
    );
  }, 60_000);

  test("when forgotPassword runs over graphql-ws, then the socket's address is counted too", async () => {
    const from = freshAddress();
    class FromAddress extends WebSocket {
      constructor(url: string, protocols?: string | string[]) {
        super(url, protocols, { localAddress: from });
      }
    }
    const client = createClient({
      url: `${server.url.replace(/^http/, "ws")}/graphql`,
      webSocketImpl: FromAddress,
      retryAttempts: 0,
      lazy: true,
    });
    try {
      const ask = async (email: string) => {
        const results: Array<{ data?: any; errors?: readonly any[] }> = [];
        for await (const r of client.iterate({ query: FORGOT_GQL, variables: { email } })) results.push(r);
        return results[0];
      };
      for (let i = 0; i < LIMIT; i++) expect((await ask(`ws${i}@example.com`)).errors).toBeUndefined();
      const refused = await ask("ws-last@example.com");
      expect(refused.errors?.[0].extensions).toEqual(expect.objectContaining({ status_code: 429 }));
    } finally {
      await client.dispose();
    }
  }, 60_000);
});

describe("across processes", () => {
  let second: TestServer;
  beforeAll(async () => {
    // A second API process on the same database, behind a proxy it trusts (loopback).
    second = await startTestServer(
      { authCacheTtlMs: 3_600_000, trustProxy: "loopback", localPayments: "allow", signup: "open" },
      server,
    );
  }, 60_000);
  afterAll(() => second?.close());

  test("when the password is reset in one process, then another process refuses the old token it had cached", async () => {
    const user = await createTestUser(server.url);
    expect((await me(user.token, second.url)).status).toBe(200); // now cached there for an hour
    const token = await mailedToken(user);
    expect((await reset({ token, password: NEW_PASSWORD })).status).toBe(200);
    expect(await eventually(async () => (await me(user.token, second.url)).status === 401, 5_000)).toBe(true);
    const fresh = await login(user.email, NEW_PASSWORD, freshAddress(), second.url);
    expect(fresh.status).toBe(200);
    expect((await me(fresh.body.access_token, second.url)).status).toBe(200);
  }, 60_000);

  test("when failures are counted in one process, then the other refuses too", async () => {
    const user = await createTestUser(server.url);
    for (let i = 0; i < LIMIT; i++) expectEnvelope(await login(user.email, "wrong password"), 401);
    expectEnvelope(await login(user.email, user.password, freshAddress(), second.url), 429);
  }, 60_000);

  test("when a trusted proxy forwards the client address, then clients behind it are counted apart", async () => {
    const from = freshAddress();
    const viaProxy = (email: string, client: string) =>
      call(second.url, "POST", FORGOT, { body: { email }, from, headers: { "x-forwarded-for": client } });
    for (let i = 0; i < LIMIT; i++) expect((await viaProxy(`p${i}@example.com`, "203.0.113.7")).status).toBe(200);
    expectEnvelope(await viaProxy("p-last@example.com", "203.0.113.7"), 429);
    expect((await viaProxy("p-last@example.com", "203.0.113.8")).status).toBe(200);
  }, 60_000);
});
