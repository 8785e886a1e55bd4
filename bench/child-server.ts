/**
 * Switchyard as a child process for benches that measure it from outside (its RSS, its CPU, its
 * latency under a batch): start `dist-bench/src/main.js` on a database and data folder, read its
 * log lines, stop it; plain HTTP requests on a keep-alive agent; a signed-up caller's API key.
 * Used by `batches.bench.ts` and `scheduling.bench.ts`.
 */
import { type ChildProcess, spawn } from "node:child_process";
import http from "node:http";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");

export interface Server {
  child: ChildProcess;
  /** e.g. `http://127.0.0.1:40123`. */
  base: string;
  pid: number;
}

/** A whole answer: status code and body bytes. */
export interface Answer {
  status: number;
  body: Buffer;
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });

/**
 * One HTTP request (JSON body when `body` is given, bearer `key`); resolves with the whole answer.
 * `fresh`: on a new connection instead of the keep-alive agent. Rejects on a connection error.
 */
export function request(
  base: string,
  method: string,
  pathName: string,
  opts: { body?: string | Buffer; key?: string; fresh?: boolean } = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      base + pathName,
      {
        method,
        agent: opts.fresh ? undefined : agent,
        headers: {
          ...(opts.body !== undefined
            ? { "content-type": "application/json", "content-length": Buffer.byteLength(opts.body) }
            : {}),
          ...(opts.key ? { authorization: `Bearer ${opts.key}` } : {}),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks) }));
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end(opts.body);
  });
}

/** The answer's JSON. @throws when its status is not `expected` (naming `what` and the body's start). */
export async function json<T>(answer: Promise<Answer>, expected: number, what: string): Promise<T> {
  const a = await answer;
  if (a.status !== expected) {
    throw new Error(`${what} answered ${a.status}: ${a.body.toString("utf8").slice(0, 300)}`);
  }
  return JSON.parse(a.body.toString("utf8")) as T;
}

/**
 * Starts Switchyard (`dist-bench/src/main.js`, node arguments from BENCH_SERVER_NODE_ARGS) on
 * `databaseUrl` and `dataDir` with `env` added; `onLine` sees each JSON log line it prints.
 * Resolves once it listens (a `SWITCHYARD_ROLE=worker` process: once its workers started, with
 * `base` empty). @throws when it exits first.
 */
export function startServer(
  databaseUrl: string,
  dataDir: string,
  env: Record<string, string>,
  onLine: (line: string) => void = () => {},
): Promise<Server> {
  const nodeArgs = (process.env.BENCH_SERVER_NODE_ARGS ?? "").split(" ").filter(Boolean);
  const child = spawn(process.execPath, [...nodeArgs, path.join(root, "dist-bench/src/main.js")], {
    env: {
      ...process.env,
      PORT: "0",
      HOST: "127.0.0.1",
      DATABASE_URL: databaseUrl,
      SWITCHYARD_DATA_DIR: dataDir,
      SWITCHYARD_MODELS_DIR: process.env.SWITCHYARD_MODELS_DIR ?? path.resolve(root, "../shared/models"),
      SWITCHYARD_ALLOW_MODEL_DOWNLOAD: "false",
      LOG_LEVEL: "info",
      ...env,
    },
    stdio: ["ignore", "pipe", "inherit"],
  });
  return new Promise((resolve, reject) => {
    let buffered = "";
    child.stdout!.on("data", (chunk: Buffer) => {
      buffered += chunk.toString();
      const lines = buffered.split("\n");
      buffered = lines.pop()!;
      for (const line of lines) {
        onLine(line);
        if (line.includes("Switchyard listening")) {
          resolve({ child, base: (JSON.parse(line) as { url: string }).url, pid: child.pid! });
        } else if (line.includes("Switchyard worker started")) {
          resolve({ child, base: "", pid: child.pid! }); // SWITCHYARD_ROLE=worker: no HTTP
        }
      }
    });
    child.on("exit", (code) => reject(new Error(`server exited with ${code}`)));
  });
}

/** Stops `server` with SIGTERM and waits for it to exit. */
export async function stopServer(server: Server): Promise<void> {
  if (server.child.exitCode !== null) return;
  const exited = new Promise((r) => server.child.once("exit", r));
  server.child.kill("SIGTERM");
  await exited;
}

/** Closes the keep-alive connections of `request` (at the end of a bench). */
export function closeRequests(): void {
  agent.destroy();
}

/** Signs a new user up (email `<label>-<now>@example.com`) and returns a new API key's plaintext. */
export async function signup(base: string, label: string): Promise<string> {
  const { access_token } = await json<{ access_token: string }>(
    request(base, "POST", "/control/v1/auth/signup", {
      body: JSON.stringify({ email: `${label}-${Date.now()}@example.com`, password: "bench-password" }),
    }),
    201,
    "signup",
  );
  const { plaintext } = await json<{ plaintext: string }>(
    request(base, "POST", "/control/v1/auth/api-keys", { body: JSON.stringify({ name: "bench" }), key: access_token }),
    201,
    "api key",
  );
  return plaintext;
}
