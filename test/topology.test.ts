/**
 * The topology of compose.yaml as real processes (issue 31, item 4): the `migrate` step on an
 * empty database, one engine process, the API supervisor with two API processes, and a worker,
 * each started with the `command` and `environment` compose.yaml gives its service (over the
 * default image's ENV, read from the Dockerfile), behind PgBouncer in transaction mode started
 * from deploy/pgbouncer/ (its configuration and entrypoint), on the test PostgreSQL. Read from the
 * files, so they cannot drift; changed are only hosts and ports (compose's service names → the
 * loopback addresses of this test's processes), paths (the container's mounts → the folders they
 * mount), and `TEST_ONLY` below. The `.env` values are this test's (`dotEnv`).
 *
 * Through the official `openai` client, graphql-ws and plain HTTP: chat and streaming; an events
 * long-poll and a GraphQL subscription woken by a completion the other API process served (the
 * API processes' access logs name the pid that served each request id); a background response
 * run by the worker with its webhook to a loopback receiver; a batch; then one API process
 * SIGKILLed while long-polls and chat traffic are in flight: its clients get errors, not hangs,
 * the survivors' are answered, nothing is charged twice, credit stays exact across all processes
 * (the ledger's sum is the balance's change), and the supervisor starts a new process that serves.
 */
import { randomBytes, randomUUID } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { type Client, createClient } from "graphql-ws";
import pg from "pg";
import WebSocket from "ws";
import { NoSessionError, assertSession } from "../src/db/session.js";
import { ensureDatabase } from "../src/db/embedded.js";
import { type ChildServer, alive, cleanUpChildren, launchChild, runScript } from "./support/child-server.js";
import {
  readCompose,
  readDockerfile,
  serviceCommand,
  serviceEnvironment,
  serviceMounts,
  sourceOfBuiltScript,
  stageEnv,
} from "./support/deploy-files.js";
import { CHAT_MODEL, MODELS_DIR, createTestApiKey, eventually, http, openaiClient } from "./support/harness.js";
import { type PgBouncer, freePort, requirePgBouncer, startDeployPgBouncer } from "./support/pgbouncer.js";
import { writeTestCatalog } from "./support/test-catalog.js";
import { type WebhookReceiver, startWebhookReceiver } from "./support/webhook-receiver.js";

/**
 * All this test adds to compose.yaml's environments: the webhook receiver listens on loopback,
 * and nothing may be downloaded here (the model files are present, so nothing would be).
 */
const TEST_ONLY = { SWITCHYARD_WEBHOOK_ALLOW_PRIVATE: "true", SWITCHYARD_ALLOW_MODEL_DOWNLOAD: "false" };

const { services } = readCompose();
/** The default image's ENV (the Dockerfile's last stage), under every service's environment. */
const IMAGE_ENV = stageEnv(readDockerfile().stages.at(-1)!);

let dotEnv: Record<string, string>;
/** compose's `host:port` of a service → where this test runs it. */
const addresses: Record<string, string> = {};
/** Named volumes → a folder each (shared by the services mounting it, as in compose). */
const volumes: Record<string, string> = {};
let enginePort: number;
let dataRoot: string;
let db: pg.Pool;
let bouncer: PgBouncer | undefined;
let receiver: WebhookReceiver;
let migration: { code: number | null; stdout: string; stderr: string };
let engine: ChildServer;
let supervisor: ChildServer;
let worker: ChildServer;
let key: string;
let teamId: string;
let start: { balance: bigint; ledger: bigint };
/** Every log record of the children, with the service that wrote it. */
const records: Array<Record<string, unknown> & { service: string }> = [];
/** Activity ids of every request answered with success (each must be charged exactly once). */
const answered = new Set<string>();

/** `service`'s environment as compose gives it, with only hosts, ports and paths made this machine's. */
function processEnv(name: string): Record<string, string> {
  const service = services[name];
  const env = { ...IMAGE_ENV, ...serviceEnvironment(service, dotEnv) };
  const mounts = serviceMounts(service, dotEnv);
  for (const [k, v] of Object.entries(env)) {
    let value = v;
    for (const [target, mount] of mounts) {
      if (value === target || value.startsWith(`${target}/`)) {
        value = (mount.named ? volumes[mount.source] : mount.source) + value.slice(target.length);
      }
    }
    const url = /^[a-z]+:\/\//.test(value) ? new URL(value) : undefined;
    const to = url && addresses[`${url.hostname}:${url.port}`];
    if (to) value = value.replace(`${url.hostname}:${url.port}`, () => to);
    env[k] = value;
  }
  if (env.HOST) env.HOST = "127.0.0.1";
  if (env.PORT) env.PORT = name === "engine" ? String(enginePort) : "0";
  return { ...env, ...TEST_ONLY };
}

/** Runs a one-shot service's command (or `args` in its place, as `docker compose run`) to its end. */
function runService(name: string, args?: string[]) {
  const [node, script, ...rest] = serviceCommand(services[name]);
  expect(node).toBe("node");
  const source = sourceOfBuiltScript(script).replace(/^src\//, "");
  return runScript(source, args ?? rest, processEnv(name), dataRoot);
}

/** Starts a long-running service's command; resolves once it logs `readyMessage`. */
function launchService(name: string, readyMessage: string): Promise<ChildServer> {
  const [node, script] = serviceCommand(services[name]);
  expect(node).toBe("node");
  const entry = /^src\/(main|worker)\.ts$/.exec(sourceOfBuiltScript(script))?.[1] as "main" | "worker";
  return launchChild({
    entry,
    inheritEnv: false,
    env: processEnv(name),
    readyMessage,
    // Several Switchyards start at once on a shared 2-core machine.
    startupTimeoutMs: 180_000,
    onLog: (r) => records.push({ ...r, service: name }),
  });
}

const sql = async <T = any>(text: string, params: unknown[] = []): Promise<T[]> =>
  (await db.query(text, params)).rows as T[];

beforeAll(async () => {
  requirePgBouncer();
  const admin = new URL(process.env.SWITCHYARD_TEST_ADMIN_URL!);
  const dbName = `topology_${randomBytes(5).toString("hex")}`;
  await ensureDatabase(admin.toString(), dbName);
  const direct = new URL(admin);
  direct.pathname = `/${dbName}`;
  db = new pg.Pool({ connectionString: direct.toString(), max: 2 });
  db.on("error", () => undefined);
  dataRoot = mkdtempSync(path.join(os.tmpdir(), "sy-topology-"));
  volumes["switchyard-data"] = mkdtempSync(path.join(dataRoot, "switchyard-data-"));
  receiver = await startWebhookReceiver();
  enginePort = await freePort();
  dotEnv = {
    POSTGRES_USER: decodeURIComponent(admin.username),
    POSTGRES_PASSWORD: decodeURIComponent(admin.password),
    POSTGRES_DB: dbName,
    SWITCHYARD_JWT_SECRET: randomBytes(32).toString("base64url"),
    SWITCHYARD_ENGINE_TOKEN: randomBytes(32).toString("base64url"),
    SWITCHYARD_PUBLIC_URL: "https://switchyard.example.com",
    // A trial's choice (deploy/compose.env.example): the local provider on an exposed service.
    SWITCHYARD_LOCAL_PAYMENTS: "allow",
    MODELS_HOST_DIR: MODELS_DIR,
    // Prices that make each request cost micro-USD (the shipped ones round short requests to 0).
    CATALOG_FILE: writeTestCatalog(CHAT_MODEL, { input: "1", cachedInput: "0.5", output: "10" }),
    // Debug: the API processes' access logs (request id and pid) are debug lines.
    LOG_LEVEL: "debug",
  };
  addresses["postgres:5432"] = `${admin.hostname}:${admin.port}`;
  addresses["engine:8090"] = `127.0.0.1:${enginePort}`;
  const bouncerEnv = serviceEnvironment(services.pgbouncer, dotEnv);
  bouncer = await startDeployPgBouncer(
    { ...bouncerEnv, DB_HOST: admin.hostname, DB_PORT: admin.port },
    direct.toString(),
  );
  addresses["pgbouncer:6432"] = `127.0.0.1:${bouncer.port}`;
  // As compose orders them: migrate (and the engine, which needs no database), then the rest.
  [migration, engine] = await Promise.all([runService("migrate"), launchService("engine", "Switchyard engine ready")]);
  if (migration.code !== 0) throw new Error(`migrate exited ${migration.code}: ${migration.stderr}`);
  const email = `owner-${randomBytes(4).toString("hex")}@example.com`;
  const password = "topology test password";
  let owner: Awaited<ReturnType<typeof runService>>;
  [supervisor, worker, owner] = await Promise.all([
    launchService("api", "Switchyard supervisor ready"),
    launchService("worker", "Switchyard worker started"),
    // The first owner, as docs/deploy.md says: `docker compose run --rm migrate … create-owner`.
    runService("migrate", ["create-owner", email, "--password", password]),
  ]);
  if (owner.code !== 0) throw new Error(`create-owner exited ${owner.code}: ${owner.stderr}`);
  const login = await http(supervisor.url, "POST", "/control/v1/auth/login", { body: { email, password } });
  expect(login.status).toBe(200);
  teamId = login.body.user.team_id;
  key = (await createTestApiKey(supervisor.url, login.body.access_token)).key;
  start = await credit();
}, 240_000);

afterAll(async () => {
  for (const child of [supervisor, worker, engine]) {
    if (child && child.child.exitCode === null && child.child.signalCode === null) child.child.kill("SIGTERM");
  }
  await Promise.all([supervisor, worker, engine].map((c) => c?.exited));
  await bouncer?.stop();
  await receiver?.close();
  await db?.end();
  await cleanUpChildren(dataRoot);
}, 90_000);

/** The team's balance and the sum of its ledger, read in one statement. */
async function credit(): Promise<{ balance: bigint; ledger: bigint }> {
  const [row] = await sql<{ balance: string; ledger: string }>(
    `SELECT t.credit_balance_micros AS balance,
            (SELECT coalesce(sum(amount_micros), 0) FROM credit_ledger WHERE team_id = t.id) AS ledger
       FROM teams t WHERE t.id = $1`,
    [teamId],
  );
  return { balance: BigInt(row.balance), ledger: BigInt(row.ledger) };
}

/** The pids of the supervisor's API processes, as its ready record lists them. */
function apiPids(): number[] {
  return (supervisor.ready.pids as Array<{ role: string; pid: number }>)
    .filter((p) => p.role === "api")
    .map((p) => p.pid);
}

/** The pid of the API process that served request `requestId` (its access log line), once logged. */
async function servedBy(requestId: string): Promise<number> {
  let pid: number | undefined;
  await eventually(async () => {
    pid = records.find((r) => r.msg === "request" && r.requestId === requestId)?.pid as number | undefined;
    return pid !== undefined;
  }, 10_000);
  if (pid === undefined) throw new Error(`no access log line for request ${requestId}`);
  return pid;
}

/** Whether process `pid` has node-llama-cpp's native library mapped (it loaded the engine). */
function loadsLlama(pid: number): boolean {
  return readFileSync(`/proc/${pid}/maps`, "utf8").includes("/@node-llama-cpp/");
}

/** Headers of a request on a connection of its own (the supervisor hands each new one to the next process). */
const FRESH = { connection: "close" };

/** A chat completion on a fresh connection; its activity id is recorded as answered. */
async function chat(metadata?: Record<string, unknown>) {
  const res = await http(supervisor.url, "POST", "/v1/chat/completions", {
    token: key,
    headers: FRESH,
    body: { model: CHAT_MODEL, messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 8, metadata },
  });
  expect([res.status, res.text]).toEqual([200, expect.stringContaining('"chat.completion"')]);
  answered.add(String(res.body.id).replace(/^chatcmpl-/, ""));
  return { id: res.body.id as string, pid: await servedBy(res.headers.get("x-request-id")!) };
}

/** A new stream of the team (events and subscriptions filter on it). */
async function newStream(): Promise<string> {
  const res = await http(supervisor.url, "POST", "/v1/streams", { token: key, body: { name: `s-${randomUUID()}` } });
  expect(res.status).toBe(201);
  return res.body.id;
}

test("when compose.yaml's services start, then the migration ran once, one engine serves two API processes and a worker, through PgBouncer in transaction mode", async () => {
  const [{ n }] = await sql<{ n: number }>("SELECT count(*)::int AS n FROM migrations");
  expect(n).toBeGreaterThan(20);
  expect(migration.stdout).toBe(`database migrated: ${n} migrations applied in all\n`);
  expect(engine.ready.models).toEqual(expect.arrayContaining([CHAT_MODEL]));
  expect(supervisor.ready).toMatchObject({ apiProcesses: 2, workerProcess: false, engineProcess: null });
  expect(apiPids()).toHaveLength(2);
  for (const pid of [...apiPids(), worker.child.pid!, engine.child.pid!]) expect(alive(pid)).toBe(true);
  // The models are loaded once: node-llama-cpp's library is in the engine process alone.
  expect(loadsLlama(engine.child.pid!)).toBe(true);
  for (const pid of [...apiPids(), worker.child.pid!, supervisor.child.pid!]) {
    expect([pid, loadsLlama(pid)]).toEqual([pid, false]);
  }
  // Every path in the services' settings is one of this machine's (a mount's source).
  for (const name of ["migrate", "engine", "api", "worker"]) {
    const paths = Object.values(processEnv(name)).filter((v) => v.startsWith("/"));
    expect([name, paths.filter((p) => !existsSync(p))]).toEqual([name, []]);
  }
  // DATABASE_URL is the pooler in transaction mode (no session), DATABASE_DIRECT_URL keeps one.
  const api = processEnv("api");
  await expect(assertSession(api.DATABASE_URL, "the test")).rejects.toBeInstanceOf(NoSessionError);
  await expect(assertSession(api.DATABASE_DIRECT_URL, "the test")).resolves.toBeUndefined();
  // The probes of deploy/k8s and compose's health check.
  for (const probe of ["/v1/health", "/v1/health/ready"]) {
    expect((await http(supervisor.url, "GET", probe, { headers: FRESH })).status).toBe(200);
  }
  // Exposed (a public SWITCHYARD_PUBLIC_URL): invite-only signup, as compose sets it.
  const signup = await http(supervisor.url, "POST", "/control/v1/auth/signup", {
    body: { email: "someone@example.com", password: "correct horse battery" },
  });
  expect(signup.status).toBe(403);
});

test("when a client chats and streams through the openai client, then both API processes answer through the engine process", async () => {
  const client = openaiClient(supervisor.url, key);
  const answer = await client.chat.completions.create({
    model: CHAT_MODEL,
    messages: [{ role: "user", content: "Once upon a time" }],
    max_tokens: 8,
  });
  expect(answer.choices[0].message.content?.length).toBeGreaterThan(0);
  answered.add(answer.id.replace(/^chatcmpl-/, ""));
  let text = "";
  let streamId = "";
  for await (const chunk of await client.chat.completions.create({
    model: CHAT_MODEL,
    messages: [{ role: "user", content: "Once upon a time" }],
    max_tokens: 8,
    stream: true,
  })) {
    streamId = chunk.id;
    text += chunk.choices[0]?.delta?.content ?? "";
  }
  expect(text.length).toBeGreaterThan(0);
  answered.add(streamId.replace(/^chatcmpl-/, ""));
  const pids = new Set<number>();
  for (let i = 0; i < 6 && pids.size < 2; i++) pids.add((await chat()).pid);
  expect([...pids].sort()).toEqual([...apiPids()].sort());
}, 60_000);

test("when a long-poll waits on one API process, then a completion the other served wakes it", async () => {
  let crossed: { poll: number; completion: number } | undefined;
  for (let i = 0; i < 8 && !crossed; i++) {
    const stream = await newStream();
    const poll = fetch(`${supervisor.url}/v1/responses/events?stream_id=${stream}&wait_ms=30000`, {
      headers: { authorization: `Bearer ${key}`, ...FRESH },
    });
    // Let the long-poll start waiting first (if it did not, its first read finds the event).
    await new Promise((r) => setTimeout(r, 1_000));
    const done = await chat({ stream_id: stream });
    const page = await poll;
    expect(page.status).toBe(200);
    const body = (await page.json()) as { data: Array<{ response_id: string }> };
    expect(body.data.map((e) => `chatcmpl-${e.response_id}`)).toEqual([done.id]);
    const pollPid = await servedBy(page.headers.get("x-request-id")!);
    if (pollPid !== done.pid) crossed = { poll: pollPid, completion: done.pid };
  }
  expect(crossed).toBeDefined();
  expect(apiPids()).toEqual(expect.arrayContaining([crossed!.poll, crossed!.completion]));
}, 90_000);

test("when a graphql-ws subscriber listens on one API process, then completions served by either process reach it", async () => {
  const stream = await newStream();
  const client: Client = createClient({
    url: `${supervisor.url.replace(/^http/, "ws")}/graphql`,
    webSocketImpl: WebSocket,
    connectionParams: { authorization: `Bearer ${key}` },
    retryAttempts: 0,
  });
  const received: string[] = [];
  const errors: unknown[] = [];
  const dispose = client.subscribe(
    {
      query: "subscription ($s: ID) { completionEvents(streamId: $s) { responseId status } }",
      variables: { s: stream },
    },
    {
      next: (r) => (r.errors ? errors.push(...r.errors) : received.push((r.data as any).completionEvents.responseId)),
      error: (e) => errors.push(e),
      complete: () => undefined,
    },
  );
  try {
    // A subscription delivers what commits after it starts: the first completions may come before.
    await new Promise((r) => setTimeout(r, 1_000));
    const servedBy = new Map<string, number>();
    let firstSeen = -1;
    for (let i = 0; i < 10; i++) {
      const done = await chat({ stream_id: stream });
      const id = done.id.replace(/^chatcmpl-/, "");
      servedBy.set(id, done.pid);
      await eventually(async () => received.includes(id), firstSeen < 0 ? 3_000 : 10_000);
      if (received.includes(id) && firstSeen < 0) firstSeen = i;
      const pidsSeen = new Set(received.map((r) => servedBy.get(r)));
      if (pidsSeen.size === 2) break;
    }
    expect(errors).toEqual([]);
    // Once one arrived, every later completion arrived, whichever process served it.
    const sent = [...servedBy.keys()];
    expect(sent.slice(firstSeen).filter((id) => !received.includes(id))).toEqual([]);
    expect(new Set(received.map((r) => servedBy.get(r)))).toEqual(new Set(apiPids()));
  } finally {
    dispose();
    await client.dispose();
  }
}, 90_000);

test("when a background response asks for a webhook, then the worker runs it through the engine and the receiver gets it", async () => {
  const res = await http(supervisor.url, "POST", "/v1/responses", {
    token: key,
    body: {
      model: CHAT_MODEL,
      input: "Once upon a time",
      background: true,
      max_output_tokens: 8,
      metadata: { completion_webhook: `${receiver.url}/topology`, webhook_token: "topology-token" },
    },
  });
  expect(res.status).toBe(200);
  expect(await eventually(async () => receiver.on("/topology").length > 0, 60_000)).toBe(true);
  const [hook] = receiver.on("/topology");
  expect(hook.headers.authorization).toBe("Bearer topology-token");
  const delivered = JSON.parse(hook.body);
  expect(delivered).toMatchObject({ id: res.body.id });
  expect(["completed", "incomplete"]).toContain(delivered.status);
  const stored = await http(supervisor.url, "GET", `/v1/responses/${res.body.id}`, { token: key, headers: FRESH });
  expect(stored.body.status).toBe(delivered.status);
  // Run by the worker: the job queue's job, done.
  const [job] = await sql<{ state: string }>(
    "SELECT state FROM pgboss.job WHERE name = 'response-generate' AND data->>'responseId' = $1",
    [res.body.id],
  );
  expect(job?.state).toBe("completed");
}, 90_000);

test("when a batch is created, then the worker answers every item", async () => {
  const item = (id: string) => ({
    custom_id: id,
    body: { model: CHAT_MODEL, messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 4 },
  });
  const res = await http(supervisor.url, "POST", "/v1/batches", {
    token: key,
    body: { requests: [item("a"), item("b"), item("c")] },
  });
  expect(res.status).toBe(201);
  let results: any[] | undefined;
  await eventually(async () => {
    results = (await http(supervisor.url, "GET", `/v1/batches/${res.body.id}/results`, { token: key })).body.results;
    return Array.isArray(results);
  }, 90_000);
  expect(results?.map((r) => [r.custom_id, r.status, r.result_json?.object])).toEqual([
    ["a", "completed", "chat.completion"],
    ["b", "completed", "chat.completion"],
    ["c", "completed", "chat.completion"],
  ]);
}, 120_000);

/** How a request ended: its status and body, or an error (`hang…` when it outlived its time limit); and when it started. */
type Outcome = ({ status: number; body: any } | { error: string }) & { startedAt: number };

/** When the API process was killed (for the errors' messages). */
let killedAt = 0;

/** A request on a fresh connection that settles within 60 s whatever happens to its process. */
async function attempt(pathName: string, init: { method?: string; body?: unknown } = {}): Promise<Outcome> {
  const startedAt = Date.now();
  try {
    const res = await fetch(`${supervisor.url}${pathName}`, {
      method: init.method ?? "GET",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json", ...FRESH },
      body: init.body === undefined ? undefined : JSON.stringify(init.body),
      signal: AbortSignal.timeout(60_000),
    });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : undefined, startedAt };
  } catch (err) {
    const hang = (err as Error).name === "TimeoutError";
    const error = hang
      ? `hang (started ${startedAt - killedAt} ms after the kill)`
      : String((err as Error).cause ?? err);
    return { error, startedAt };
  }
}

/** A chat completion request's body, on `stream` when given. */
const chatBody = (stream?: string) => ({
  model: CHAT_MODEL,
  messages: [{ role: "user", content: "Once upon a time" }],
  max_tokens: 8,
  ...(stream ? { metadata: { stream_id: stream } } : {}),
});

describe("one API process SIGKILLed in the middle of traffic", () => {
  const victim = () => apiPids()[0];

  test("when it dies, then its clients get errors at once, the other process's are answered, and nothing hangs", async () => {
    const idle = await newStream();
    // Long-polls on a stream nothing completes on, handed in turn to both processes: in flight
    // on each when one dies.
    const polls: Array<Promise<Outcome>> = [];
    for (let i = 0; i < 6; i++) {
      polls.push(attempt(`/v1/responses/events?stream_id=${idle}&wait_ms=30000`));
      await new Promise((r) => setTimeout(r, 50));
    }
    const settled: Outcome[] = [];
    for (const p of polls) void p.then((o) => settled.push(o));
    // Chat traffic from four clients, each request on a fresh connection, across the kill.
    const traffic: Outcome[] = [];
    let stop = false;
    const clients = Array.from({ length: 4 }, async () => {
      while (!stop) traffic.push(await attempt("/v1/chat/completions", { method: "POST", body: chatBody() }));
    });
    await eventually(async () => traffic.length >= 4, 30_000);
    killedAt = Date.now();
    process.kill(victim(), "SIGKILL");
    expect(await eventually(async () => settled.some((o) => "error" in o), 15_000)).toBe(true);
    const exited = () => records.some((r) => r.msg === "a Switchyard process exited; restarting it");
    expect(await eventually(async () => exited(), 15_000)).toBe(true);
    const knownAt = Date.now();
    // The survivor's long-polls still wait: a completion on their stream ends them.
    const release = await attempt("/v1/chat/completions", { method: "POST", body: chatBody(idle) });
    expect("status" in release && release.status).toBe(200);
    const releaseId = (release as { body: { id: string } }).body.id;
    await eventually(async () => traffic.filter((o) => o.startedAt > knownAt).length >= 8, 30_000);
    stop = true;
    await Promise.all(clients);
    for (const o of [release, ...traffic]) {
      if ("status" in o && o.status === 200) answered.add(String(o.body.id).replace(/^chatcmpl-/, ""));
    }
    const pages = await Promise.all(polls);
    // Errors, never hangs.
    expect([...pages, ...traffic].filter((o) => "error" in o && o.error.startsWith("hang"))).toEqual([]);
    // The victim's long-polls failed at once; the survivor's were woken by the completion.
    const failed = pages.filter((o) => "error" in o);
    const served = pages.filter((o): o is Outcome & { status: number; body: any } => "status" in o);
    expect(failed.length).toBeGreaterThanOrEqual(1);
    expect(served.length).toBeGreaterThanOrEqual(1);
    for (const page of served) {
      expect(page.status).toBe(200);
      expect(page.body.data.map((e: any) => `chatcmpl-${e.response_id}`)).toEqual([releaseId]);
    }
    // Once the supervisor knew, every new request was answered (by the survivor).
    const late = traffic.filter((o) => o.startedAt > knownAt);
    expect(late.filter((o) => !("status" in o) || o.status !== 200)).toEqual([]);
    expect(traffic.filter((o) => "status" in o).length).toBeGreaterThan(8);
    expect(records.find((r) => r.msg === "a Switchyard process exited; restarting it")).toMatchObject({
      role: "api",
      pid: victim(),
      signal: "SIGKILL",
    });
  }, 120_000);

  test("when the supervisor has restarted it, then a new process serves beside the survivor", async () => {
    const back = () => records.find((r) => r.msg === "Switchyard process back" && r.role === "api");
    expect(await eventually(async () => back() !== undefined, 90_000)).toBe(true);
    const pid = back()!.pid as number;
    expect(pid).not.toBe(victim());
    expect(alive(pid)).toBe(true);
    expect(alive(apiPids()[1])).toBe(true);
    const seen = new Set<number>();
    for (let i = 0; i < 20 && !seen.has(pid); i++) seen.add((await chat()).pid);
    expect(seen).toContain(pid);
  }, 120_000);

  test("when every process is done, then each answer was charged once and the ledger's sum is the balance's change", async () => {
    // Every answered request's charge, once (the ledger is unique by type and source).
    const charged = async () =>
      sql<{ source_id: string; n: number }>(
        "SELECT source_id, count(*)::int AS n FROM credit_ledger WHERE team_id = $1 AND type = 'usage' GROUP BY source_id",
        [teamId],
      );
    await eventually(async () => {
      const ids = new Set((await charged()).map((r) => r.source_id));
      return [...answered].every((id) => ids.has(id));
    }, 15_000);
    const rows = await charged();
    expect(rows.filter((r) => r.n !== 1)).toEqual([]);
    const ids = new Set(rows.map((r) => r.source_id));
    expect([...answered].filter((id) => !ids.has(id))).toEqual([]);
    expect(answered.size).toBeGreaterThan(20);
    // Every charge is an activity record's cost, and every costed record was charged.
    const [costs] = await sql<{ n: number; cost: string; usage: string }>(
      `SELECT count(*)::int AS n, coalesce(sum(cost_micros), 0) AS cost,
              (SELECT coalesce(-sum(amount_micros), 0) FROM credit_ledger WHERE team_id = $1 AND type = 'usage') AS usage
         FROM activity WHERE team_id = $1 AND cost_micros > 0`,
      [teamId],
    );
    expect(costs.n).toBe(rows.length);
    expect(BigInt(costs.usage)).toBe(BigInt(costs.cost));
    // The balance moved by exactly what the ledger recorded, across every process.
    const now = await credit();
    expect(now.balance - start.balance).toBe(now.ledger - start.ledger);
    expect(now.ledger - start.ledger).toBe(-BigInt(costs.usage));
  }, 60_000);
});
