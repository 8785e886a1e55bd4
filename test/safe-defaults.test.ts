/**
 * Safe by default (issue 27, item 2): `npm start`'s entry binds 127.0.0.1 unless `HOST` says
 * otherwise and its banner names the address really bound; an exposed bind (`HOST=0.0.0.0`)
 * refuses to start with the local payment provider unless `SWITCHYARD_LOCAL_PAYMENTS=allow`, and
 * closes signup to invitations by default; `SWITCHYARD_SIGNUP=closed` answers 403 naming the
 * setting (REST, GraphQL, with or without an invitation); `npm run admin -- create-owner` makes an
 * owner who can log in, idempotently, against `DATABASE_URL` or the embedded PostgreSQL (started
 * for the command, or the one a running server serves).
 */
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { loadConfig, packageVersion } from "../src/config/config.js";
import { ChildStartError, killChildren, launchChild, runScript } from "./support/child-server.js";
import { refuseUnsafeExposure } from "../src/app/exposure.js";
import {
  type TestServer,
  createTestDatabase,
  createTestUser,
  eventually,
  expectEnvelope,
  http,
  startTestServer,
} from "./support/harness.js";
import { captureLogs } from "./support/log-capture.js";
import { freshEmail, invite } from "./support/teams.js";

let database: Awaited<ReturnType<typeof createTestDatabase>>;
beforeAll(async () => {
  database = await createTestDatabase();
});
afterAll(async () => {
  killChildren();
  await database?.close();
});

/** A non-loopback IPv4 address of this machine. */
function externalAddress(): string {
  const found = Object.values(os.networkInterfaces())
    .flat()
    .find((a) => a && a.family === "IPv4" && !a.internal)?.address;
  if (!found) throw new Error("this test needs a non-loopback IPv4 interface (none found in os.networkInterfaces())");
  return found;
}

const signup = (base: string, body: unknown) => http(base, "POST", "/control/v1/auth/signup", { body });

/** `npm run admin -- …` (the TypeScript source, as the other entry points' tests run them). */
function runAdmin(
  args: string[],
  env: Record<string, string | undefined>,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const defined: Record<string, string> = { HOME: os.tmpdir() };
  for (const [k, v] of Object.entries(env)) if (v !== undefined) defined[k] = v;
  return runScript("scripts/admin-cli.ts", args, defined, os.tmpdir());
}

describe("the bind", () => {
  test("when nothing is configured, then HOST is 127.0.0.1 and signup is open; a wildcard HOST makes it invite", () => {
    const env = { SWITCHYARD_JWT_SECRET: "safe-defaults-test-secret-safe-defaults-test" };
    expect(loadConfig(env)).toMatchObject({ host: "127.0.0.1", signup: "open", localPayments: "loopback" });
    expect(loadConfig({ ...env, HOST: "0.0.0.0" }).signup).toBe("invite");
    expect(loadConfig({ ...env, HOST: "::" }).signup).toBe("invite");
    expect(loadConfig({ ...env, HOST: "::1" }).signup).toBe("open");
    expect(loadConfig({ ...env, HOST: "0.0.0.0", SWITCHYARD_SIGNUP: "open" }).signup).toBe("open");
    expect(() => loadConfig({ ...env, SWITCHYARD_SIGNUP: "maybe" })).toThrow(/SWITCHYARD_SIGNUP/);
  });

  test("when npm start's entry runs without HOST, then it listens on 127.0.0.1 only; its banner names the address, signup, payments, the webhook guard", async () => {
    const server = await launchChild({
      databaseUrl: database.url,
      dataDir: mkdtempSync(path.join(os.tmpdir(), "switchyard-bind-")),
      env: { HOST: undefined, SWITCHYARD_LOG_FORMAT: "json" },
    });
    try {
      const port = Number(new URL(server.url).port);
      expect(server.ready).toEqual({
        level: 30,
        time: expect.any(Number),
        pid: server.child.pid,
        hostname: os.hostname(),
        msg: "Switchyard listening",
        address: `127.0.0.1:${port}`,
        reachableFrom: "this machine only",
        url: `http://127.0.0.1:${port}`,
        graphql: `http://127.0.0.1:${port}/graphql`,
        version: packageVersion,
        signup: "open",
        payments: "local: top-ups credited without payment",
        webhookGuard: "on: webhooks to private and loopback addresses refused",
      });
      expect((await fetch(`${server.url}/v1/health`)).status).toBe(200);
      // Not reachable through this machine's other interfaces.
      await expect(fetch(`http://${externalAddress()}:${port}/v1/health`)).rejects.toThrow();
    } finally {
      server.child.kill("SIGINT");
      await server.exited;
    }
  }, 90_000);

  test("when HOST=0.0.0.0 with the local payment provider and no opt-in, then the start fails naming the settings", async () => {
    const failed = await launchChild({
      databaseUrl: database.url,
      dataDir: mkdtempSync(path.join(os.tmpdir(), "switchyard-exposed-")),
      env: { HOST: "0.0.0.0", SWITCHYARD_PAYMENT_PROVIDER: undefined, SWITCHYARD_LOCAL_PAYMENTS: undefined },
    }).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(failed).toBeInstanceOf(ChildStartError);
    const { code, stderr } = failed as ChildStartError;
    expect(code).toBe(1);
    expect(stderr).toMatch(/^switchyard: HOST=0\.0\.0\.0 means this service can be reached from the network/);
    expect(stderr).toContain("SWITCHYARD_PAYMENT_PROVIDER=stripe");
    expect(stderr).toContain("SWITCHYARD_LOCAL_PAYMENTS=allow");
    // One line, no stack trace.
    expect(stderr.trim().split("\n")).toHaveLength(1);
  }, 60_000);
});

describe("a loopback bind behind a reverse proxy", () => {
  test("when SWITCHYARD_PUBLIC_URL is public or a proxy is trusted, then the service counts as exposed: signup defaults to invite and the local provider needs the opt-in", () => {
    const base = { SWITCHYARD_JWT_SECRET: "x".repeat(32), SWITCHYARD_DATA_DIR: os.tmpdir() };
    const behindProxy = loadConfig({ ...base, SWITCHYARD_PUBLIC_URL: "https://api.example.com" });
    expect(behindProxy.host).toBe("127.0.0.1");
    expect(behindProxy.signup).toBe("invite");
    expect(() => refuseUnsafeExposure(behindProxy)).toThrow(
      /^SWITCHYARD_PUBLIC_URL=https:\/\/api\.example\.com means this service can be reached from the network/,
    );
    const trusted = loadConfig({ ...base, SWITCHYARD_TRUST_PROXY: "loopback" });
    expect(trusted.signup).toBe("invite");
    expect(() => refuseUnsafeExposure(trusted)).toThrow(/^SWITCHYARD_TRUST_PROXY=loopback/);
    expect(() =>
      refuseUnsafeExposure(
        loadConfig({ ...base, SWITCHYARD_TRUST_PROXY: "loopback", SWITCHYARD_LOCAL_PAYMENTS: "allow" }),
      ),
    ).not.toThrow();
    // On this machine only: open signup, free top-ups served.
    const local = loadConfig(base);
    expect(local.signup).toBe("open");
    expect(() => refuseUnsafeExposure(local)).not.toThrow();
  });
});

describe("an exposed bind with the local provider allowed", () => {
  let exposed: TestServer;
  const logs = captureLogs("info");
  beforeAll(async () => {
    exposed = await startTestServer({ host: "0.0.0.0", localPayments: "allow" }, undefined, { logger: logs.logger });
  }, 60_000);
  afterAll(() => exposed.close());

  test("when it starts, then the banner names the bound address, signup, payments and the webhook guard", () => {
    const banner = logs.records().find((r) => r.msg === "Switchyard listening");
    const port = Number(new URL(exposed.url).port);
    expect(banner).toMatchObject({
      address: `0.0.0.0:${port}`,
      reachableFrom: "the network",
      url: `http://127.0.0.1:${port}`,
      version: packageVersion,
      signup: "invite",
      payments: expect.stringMatching(/^local: top-ups credited without payment \(SWITCHYARD_LOCAL_PAYMENTS=allow\)/),
      webhookGuard: expect.stringMatching(/^on: /),
    });
  });

  test("when a client on another interface connects, then it is served", async () => {
    const port = new URL(exposed.url).port;
    expect((await fetch(`http://${externalAddress()}:${port}/v1/health`)).status).toBe(200);
  });

  test("when someone signs up without an invitation, then 403 naming SWITCHYARD_SIGNUP; bad input is still 400", async () => {
    const res = await signup(exposed.url, { email: freshEmail("stranger"), password: "correct horse battery" });
    expectEnvelope(res, 403);
    expect(res.body.detail).toContain("SWITCHYARD_SIGNUP=invite");
    expect(res.body.extra).toEqual({ setting: "SWITCHYARD_SIGNUP", signup: "invite" });
    expectEnvelope(await signup(exposed.url, { email: "not-an-email", password: "correct horse battery" }), 400);
    const count = await exposed.db<{ n: string }>("SELECT count(*)::text AS n FROM users");
    expect(count[0].n).toBe("0");
  });

  test("when an owner made by the admin CLI invites an email, then that email signs up with its invite_token", async () => {
    const owner = freshEmail("owner");
    const made = await runAdmin(["create-owner", owner], {
      DATABASE_URL: exposed.databaseUrl,
      SWITCHYARD_JWT_SECRET: "test-secret-test-secret-test-secret-0123",
      SWITCHYARD_DATA_DIR: mkdtempSync(path.join(os.tmpdir(), "switchyard-admin-")),
    });
    expect(made).toMatchObject({ code: 0, stderr: "" });
    const password = /^password: (\S+)$/m.exec(made.stdout)![1];
    const login = await http(exposed.url, "POST", "/control/v1/auth/login", { body: { email: owner, password } });
    expect(login.status).toBe(200);
    const email = freshEmail("invited");
    const invited = await invite(exposed.url, login.body.access_token, email);
    expect(invited.status).toBe(201);
    const joined = await signup(exposed.url, {
      email,
      password: "correct horse battery",
      invite_token: invited.body.invite_token,
    });
    expect(joined.status).toBe(201);
    expect(joined.body.user.team_id).toBe(login.body.user.team_id);
  }, 60_000);
});

describe("SWITCHYARD_SIGNUP=closed", () => {
  let closed: TestServer;
  let open: TestServer;
  beforeAll(async () => {
    closed = await startTestServer({ signup: "closed" });
    // A second process on the same database, signup open: the inviting owner signs up there.
    open = await startTestServer({}, closed);
  }, 60_000);
  afterAll(async () => {
    await open.close();
    await closed.close();
  });

  test("when someone signs up, then 403 with the envelope naming the setting, over REST and GraphQL", async () => {
    const email = freshEmail("closed");
    const res = await signup(closed.url, { email, password: "correct horse battery" });
    expectEnvelope(res, 403);
    expect(res.body.detail).toMatch(/^Signup is closed on this server \(SWITCHYARD_SIGNUP=closed\)/);
    // Refused before the body is read: an invalid one gets the same answer.
    expectEnvelope(await signup(closed.url, { email: "nope" }), 403);
    const gql = await http(closed.url, "POST", "/graphql", {
      body: {
        query: "mutation ($i: SignupInput!) { signup(input: $i) { message } }",
        variables: { i: { email, password: "correct horse battery" } },
      },
    });
    expect(gql.body.errors?.[0]).toMatchObject({ extensions: { status_code: 403 } });
    expect(gql.body.errors[0].message).toContain("SWITCHYARD_SIGNUP=closed");
    expect(await closed.db("SELECT 1 FROM users WHERE email = $1", [email])).toHaveLength(0);
  });

  test("when an invited email signs up on a closed server, then 403 too; logging in still works", async () => {
    const owner = await createTestUser(open.url);
    const email = freshEmail("closed-invitee");
    const invited = await invite(open.url, owner.token, email);
    expect(invited.status).toBe(201);
    const res = await signup(closed.url, {
      email,
      password: "correct horse battery",
      invite_token: invited.body.invite_token,
    });
    expectEnvelope(res, 403);
    const login = await http(closed.url, "POST", "/control/v1/auth/login", {
      body: { email: owner.email, password: owner.password },
    });
    expect(login.status).toBe(200);
  });
});

describe("npm run admin -- create-owner", () => {
  test("when run twice against DATABASE_URL, then one owner who can log in; the second run reports it", async () => {
    const server = await startTestServer({ signup: "closed" });
    try {
      const env = {
        DATABASE_URL: server.databaseUrl,
        SWITCHYARD_JWT_SECRET: "test-secret-test-secret-test-secret-0123",
        SWITCHYARD_DATA_DIR: mkdtempSync(path.join(os.tmpdir(), "switchyard-admin-")),
      };
      const email = freshEmail("first-owner");
      const first = await runAdmin(["create-owner", email, "--password", "a long enough password"], env);
      expect(first).toMatchObject({ code: 0, stderr: "" });
      expect(first.stdout).toMatch(
        new RegExp(`^created owner ${email} \\(team [0-9a-f-]{36}\\)\\npassword: the one given\\n$`),
      );
      const login = await http(server.url, "POST", "/control/v1/auth/login", {
        body: { email, password: "a long enough password" },
      });
      expect(login.status).toBe(200);
      expect(login.body.user.role).toBe("owner");
      // The account signup makes: a team of its own with the signup credit.
      const me = await http(server.url, "GET", "/control/v1/teams/me", { token: login.body.access_token });
      expect(me.status).toBe(200);

      const again = await runAdmin(["create-owner", email.toUpperCase(), "--password", "another password!"], env);
      expect(again).toMatchObject({ code: 0, stderr: "" });
      expect(again.stdout).toBe(
        `${email} already has an account (owner of team ${login.body.user.team_id}); nothing changed\n`,
      );
      expect(await server.db("SELECT 1 FROM users WHERE lower(email) = $1", [email])).toHaveLength(1);
      // The password was left alone.
      const old = await http(server.url, "POST", "/control/v1/auth/login", {
        body: { email, password: "a long enough password" },
      });
      expect(old.status).toBe(200);

      const bad = await runAdmin(["create-owner", "not-an-email"], env);
      expect(bad.code).toBe(1);
      expect(bad.stderr).toMatch(/^switchyard admin: .*email/);
      const short = await runAdmin(["create-owner", freshEmail(), "--password", "short"], env);
      expect(short.code).toBe(1);
      expect(short.stderr).toContain("password");
      const usage = await runAdmin([], env);
      expect(usage.code).toBe(2);
      expect(usage.stderr).toContain("usage: npm run admin -- create-owner EMAIL");
    } finally {
      await server.close();
    }
  }, 90_000);

  test("with the embedded PostgreSQL: it starts the cluster itself, then works beside a running server", async () => {
    const dataDir = mkdtempSync(path.join(os.tmpdir(), "switchyard-admin-embedded-"));
    const env = { SWITCHYARD_DATA_DIR: dataDir, SWITCHYARD_JWT_SECRET: "child-server-test-secret-child-server-test" };
    const email = freshEmail("embedded-owner");
    const first = await runAdmin(["create-owner", email], {
      ...env,
      SWITCHYARD_ADMIN_PASSWORD: "from the environment",
    });
    expect(first.code).toBe(0);
    expect(first.stdout).toContain(`created owner ${email}`);
    expect(first.stdout).toContain("password: the one given");

    const server = await launchChild({ dataDir });
    try {
      const login = await http(server.url, "POST", "/control/v1/auth/login", {
        body: { email, password: "from the environment" },
      });
      expect(login.status).toBe(200);
      // The server holds the cluster: the CLI uses it instead of refusing the folder.
      const again = await runAdmin(["create-owner", email], env);
      expect(again).toMatchObject({ code: 0, stderr: "" });
      expect(again.stdout).toContain("already has an account");
      const second = freshEmail("second-owner");
      const made = await runAdmin(["create-owner", second], env);
      expect(made.code).toBe(0);
      const password = /^password: (\S+)$/m.exec(made.stdout)![1];
      expect(password.length).toBeGreaterThanOrEqual(16);
      expect(
        await eventually(
          async () =>
            (await http(server.url, "POST", "/control/v1/auth/login", { body: { email: second, password } })).status ===
            200,
        ),
      ).toBe(true);
    } finally {
      server.child.kill("SIGINT");
      await server.exited;
    }
  }, 120_000);
});
