/**
 * Test harness: a whole Switchyard (real HTTP server on a free loopback port, real engine on the
 * test GGUF model) over a fresh database cloned from the migrated template, plus factories that
 * go through the public API (signup, API keys) and the official clients.
 */
import { randomBytes } from "node:crypto";
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import pg from "pg";
import { type ConfigInput, loadConfig, packageRoot } from "../../src/config/config.js";
import { openDatabase } from "../../src/db/data-source.js";
import { ensureDatabase } from "../../src/db/embedded.js";
import { type StartOptions, type Switchyard, startSwitchyard } from "../../src/server.js";

const TEMPLATE_DB = "switchyard_test_template";

/**
 * The folder holding the test model, as Jest's global setup found or fetched it
 * (`test-models.mjs`: `SWITCHYARD_MODELS_DIR`, else `../shared/models` when it holds the file,
 * else `.data/models`). Absolute: child processes started by tests run in other folders.
 */
export const MODELS_DIR = path.resolve(
  process.env.SWITCHYARD_TEST_MODELS_DIR ?? process.env.SWITCHYARD_MODELS_DIR ?? path.join(packageRoot, ".data/models"),
);
export const CHAT_MODEL = "tinystories-260k";
export const EMBED_MODEL = "tinystories-260k-embed";

/** Serialises template creation and cloning across Jest workers. */
const TEMPLATE_LOCK = 7_240_612;

/**
 * Makes sure the template database exists with the real migrations applied (the first worker
 * builds it under an advisory lock), then clones it. CREATE DATABASE … TEMPLATE needs the
 * template free of connections, so cloning happens under the same lock.
 */
async function cloneTemplate(adminUrl: string, name: string): Promise<void> {
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    await admin.query("SELECT pg_advisory_lock($1)", [TEMPLATE_LOCK]);
    const found = await admin.query("SELECT 1 FROM pg_database WHERE datname = $1 AND datistemplate", [TEMPLATE_DB]);
    if (found.rowCount === 0) {
      await admin.query(`DROP DATABASE IF EXISTS ${TEMPLATE_DB} WITH (FORCE)`);
      await admin.query(`CREATE DATABASE ${TEMPLATE_DB}`);
      const url = new URL(adminUrl);
      url.pathname = `/${TEMPLATE_DB}`;
      const ds = await openDatabase(url.toString(), 1);
      await ds.destroy();
      await admin.query(`ALTER DATABASE ${TEMPLATE_DB} WITH IS_TEMPLATE true`);
    }
    await ensureDatabase(adminUrl, name, TEMPLATE_DB);
  } finally {
    await admin.query("SELECT pg_advisory_unlock($1)", [TEMPLATE_LOCK]).catch(() => undefined);
    await admin.end();
  }
}

/** Creates a database of its own for one test file, cloned from the migrated template. */
export async function createTestDatabase(): Promise<{
  url: string;
  query: <T = Record<string, unknown>>(sql: string, params?: unknown[]) => Promise<T[]>;
  close(): Promise<void>;
}> {
  const adminUrl = process.env.SWITCHYARD_TEST_ADMIN_URL;
  if (!adminUrl) throw new Error("SWITCHYARD_TEST_ADMIN_URL is unset: run the tests through jest (global setup)");
  const name = `t_${randomBytes(6).toString("hex")}`;
  await cloneTemplate(adminUrl, name);
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  const pool = new pg.Pool({ connectionString: url.toString(), max: 2 });
  pool.on("error", () => undefined); // idle clients see the server stop at teardown
  return {
    url: url.toString(),
    query: async <T>(sql: string, params?: unknown[]) => (await pool.query(sql, params)).rows as T[],
    close: () => pool.end(),
  };
}

export interface TestServer {
  app: Switchyard;
  url: string;
  databaseUrl: string;
  /** SQL against this file's database (assertions and test data). */
  db: <T = Record<string, unknown>>(sql: string, params?: unknown[]) => Promise<T[]>;
  close(): Promise<void>;
}

/** Starts Switchyard on a fresh database. `overrides` change any config setting. */
export async function startTestServer(
  overrides: Partial<ConfigInput> = {},
  /** Share another server's database (a second API process); by default a fresh one. */
  shareWith?: TestServer,
  /** Start options, e.g. a logger whose lines the test reads (`support/log-capture.ts`). */
  start: StartOptions = {},
): Promise<TestServer> {
  const database = shareWith
    ? { url: shareWith.databaseUrl, query: shareWith.db, close: async () => {} }
    : await createTestDatabase();
  const config = loadConfig(
    {},
    {
      port: 0,
      host: "127.0.0.1",
      databaseUrl: database.url,
      dataDir: mkdtempSync(path.join(os.tmpdir(), "switchyard-data-")),
      modelsDir: MODELS_DIR,
      jwtSecret: "test-secret-test-secret-test-secret-0123",
      logLevel: (process.env.LOG_LEVEL as ConfigInput["logLevel"]) ?? "silent",
      allowModelDownload: false,
      // No GPU probe (about a second per server); tests that want SWITCHYARD_GPU=auto say so.
      gpu: "off",
      // Pinned: no tuning probe per server (issue 12, item 3); test/engine-tuning.test.ts probes.
      engineThreads: 1,
      engineSequences: 8,
      ...overrides,
    },
  );
  const app = await startSwitchyard(config, start);
  return {
    app,
    url: app.url,
    databaseUrl: database.url,
    db: database.query,
    async close() {
      await app.close();
      await database.close();
      // pg-boss watches its stopping workers from a timer that wakes once a second and loads a
      // module each time; a worker whose job ended during the close (its engine shut under it) is
      // seen stopped at the next wake-up. Let that happen before the file's Jest environment goes.
      await new Promise((resolve) => setTimeout(resolve, 1_200));
    },
  };
}

/** JSON over real HTTP: `{status, body, headers}`. `body` may be an object or a raw string. */
export async function http(
  base: string,
  method: string,
  pathName: string,
  opts: { body?: unknown; token?: string; headers?: Record<string, string> } = {},
): Promise<{ status: number; body: any; headers: Headers; text: string }> {
  const headers: Record<string, string> = { ...opts.headers };
  if (opts.token) headers.authorization = `Bearer ${opts.token}`;
  let payload: string | undefined;
  if (opts.body !== undefined) {
    payload = typeof opts.body === "string" ? opts.body : JSON.stringify(opts.body);
    headers["content-type"] ??= "application/json";
  }
  const res = await fetch(base + pathName, { method, headers, body: payload });
  const text = await res.text();
  let body: unknown = text;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    /* not JSON */
  }
  return { status: res.status, body, headers: res.headers, text };
}

let userSeq = 0;

export interface TestUser {
  email: string;
  password: string;
  token: string;
  userId: string;
  teamId: string;
}

/** Signs up a new user (and team) through the API. */
export async function createTestUser(
  base: string,
  overrides: { email?: string; password?: string; name?: string } = {},
): Promise<TestUser> {
  const email = overrides.email ?? `user${++userSeq}-${randomBytes(4).toString("hex")}@example.com`;
  const password = overrides.password ?? "correct horse battery";
  const res = await http(base, "POST", "/control/v1/auth/signup", { body: { email, password, name: overrides.name } });
  if (res.status !== 201) throw new Error(`signup failed: ${res.status} ${res.text}`);
  return { email, password, token: res.body.access_token, userId: res.body.user.id, teamId: res.body.user.team_id };
}

/** Creates an API key through the API; returns the plaintext key and its id. */
export async function createTestApiKey(
  base: string,
  token: string,
  name = "test key",
): Promise<{ key: string; id: string; prefix: string }> {
  const res = await http(base, "POST", "/control/v1/auth/api-keys", { token, body: { name } });
  if (res.status !== 201) throw new Error(`api key failed: ${res.status} ${res.text}`);
  return { key: res.body.plaintext, id: res.body.id, prefix: res.body.prefix };
}

/** A signed-up user with an API key: what most data-plane tests start from. */
export async function createTestCaller(
  base: string,
): Promise<TestUser & { key: string; keyId: string; keyPrefix: string }> {
  const user = await createTestUser(base);
  const key = await createTestApiKey(base, user.token);
  return { ...user, key: key.key, keyId: key.id, keyPrefix: key.prefix };
}

/** The official OpenAI client pointed at the test server. */
export function openaiClient(base: string, apiKey: string): OpenAI {
  return new OpenAI({ apiKey, baseURL: `${base}/v1`, maxRetries: 0, timeout: 60_000 });
}

/** The official Anthropic client pointed at the test server. */
export function anthropicClient(base: string, apiKey: string): Anthropic {
  return new Anthropic({ apiKey, baseURL: base, maxRetries: 0, timeout: 60_000 });
}

/** The keys of an error body: the spec's envelope and the client dialect's (issue 27, item 1). */
export const ERROR_BODY_KEYS = ["status_code", "detail", "extra", "type", "error"];

/**
 * Asserts the error envelope of the spec (status_code, detail, optional extra), with the client
 * dialect's `error` object beside it carrying the same detail (and `type: "error"` only in
 * Anthropic's dialect; test/error-dialects.test.ts checks which path speaks which).
 */
export function expectEnvelope(res: { status: number; body: any }, status: number): void {
  expect(res.status).toBe(status);
  expect(res.body).toEqual(expect.objectContaining({ status_code: status, detail: expect.any(String) }));
  expect(Object.keys(res.body).filter((k) => !ERROR_BODY_KEYS.includes(k))).toEqual([]);
  expect(res.body.error).toEqual(expect.objectContaining({ message: res.body.detail, type: expect.any(String) }));
  if ("type" in res.body) expect(res.body.type).toBe("error");
}

/** Asserts a 400 envelope whose `extra` names `field`. */
export function expectInvalid(res: { status: number; body: any }, field: string): void {
  expectEnvelope(res, 400);
  expect((res.body.extra as Array<{ field: string }>).map((i) => i.field)).toContain(field);
}

/** Polls `check` every 50 ms for up to `timeoutMs`; true as soon as it holds (for cross-process effects). */
export async function eventually(check: () => Promise<boolean>, timeoutMs = 2_000): Promise<boolean> {
  for (const deadline = Date.now() + timeoutMs; Date.now() < deadline;) {
    if (await check()) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return check();
}

/**
 * A password-reset token of a fresh user of `server`: signs one up, asks forgot-password for it and
 * reads the token from the link in the mail it queued (`mail_outbox`).
 * @throws when forgot-password does not answer 200 or no mail arrives within 10 s.
 */
export async function passwordResetToken(server: TestServer): Promise<string> {
  const user = await createTestUser(server.url);
  const asked = await http(server.url, "POST", "/control/v1/auth/forgot-password", { body: { email: user.email } });
  if (asked.status !== 200) throw new Error(`forgot-password failed: ${asked.status} ${asked.text}`);
  let token: string | undefined;
  await eventually(async () => {
    const [mail] = await server.db<{ body_text: string }>("SELECT body_text FROM mail_outbox WHERE to_address = $1", [
      user.email,
    ]);
    token = mail ? /[?&]token=([A-Za-z0-9_-]+)/.exec(mail.body_text)?.[1] : undefined;
    return token !== undefined;
  }, 10_000);
  if (!token) throw new Error(`no reset mail to ${user.email}`);
  return token;
}

/** The activity row with `custom_id`, once its group commit has landed (undefined after 5 s). */
export async function activityByCustomId(server: TestServer, customId: string): Promise<any> {
  let row: any;
  await eventually(async () => {
    [row] = await server.db<any>("SELECT * FROM activity WHERE custom_id = $1", [customId]);
    return row !== undefined;
  }, 5_000);
  return row;
}
