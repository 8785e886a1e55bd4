/**
 * Switchyard as a real child process, for tests that need signals, SIGKILL and restarts:
 * `node --import test/support/swc-loader.mjs src/main.ts` (or `src/worker.ts`, the `npm run
 * worker` entry), compiled by SWC exactly as Jest compiles the sources. Also SQL against a child's
 * embedded PostgreSQL and the clean-up of what children leave behind.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, readFileSync, rmSync } from "node:fs";
import path from "node:path";
import { createInterface } from "node:readline";
import pg from "pg";
import { packageRoot } from "../../src/config/config.js";
import { MODELS_DIR, eventually } from "./harness.js";

const LOADER = path.join(packageRoot, "test/support/swc-loader.mjs");
const STARTUP_TIMEOUT_MS = 45_000;

export interface ChildOptions {
  /** `main` (`npm start`, default) serves HTTP; `worker` (`npm run worker`) runs the job workers only. */
  entry?: "main" | "worker";
  /**
   * The child's data folder (also its working directory, where no `switchyard.config.json` is).
   * Without `databaseUrl` the child runs the embedded PostgreSQL of this folder.
   */
  dataDir?: string;
  /** The database to use (`DATABASE_URL`); unset: the embedded one of `dataDir`. */
  databaseUrl?: string;
  /** More environment (an `undefined` value removes the variable). */
  env?: Record<string, string | undefined>;
  /**
   * `false`: the child's environment is `env` alone (with `PATH` and `HOME`), none of this test
   * process's nor the defaults below; for a test that runs exactly a deployment's settings
   * (test/topology.test.ts). Default true.
   */
  inheritEnv?: boolean;
  /**
   * In a process group of its own (default), as a shell runs a foreground job, so
   * `process.kill(-pid, "SIGINT")` is a terminal's Ctrl-C.
   */
  detached?: boolean;
  /** The log message that says it is ready (default: by `entry`, see `launchChild`). */
  readyMessage?: string;
  /** How long to wait for `readyMessage`, ms (default 45 s). */
  startupTimeoutMs?: number;
  /** Called with every JSON log record the child (and its own children) write. */
  onLog?: (record: Record<string, unknown>) => void;
}

export interface ChildServer {
  child: ChildProcess;
  /** Base URL; "" for a worker, which serves no HTTP. */
  url: string;
  /** The embedded PostgreSQL's port and postmaster pid from the startup log (0 with `databaseUrl`). */
  pgPort: number;
  pgPid: number;
  /** The log record that said it was ready ("Switchyard listening": the start banner's fields). */
  ready: Record<string, unknown>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** A child that exited before it was ready: its exit code and everything it wrote to stderr. */
export class ChildStartError extends Error {
  constructor(
    readonly code: number | null,
    readonly signal: NodeJS.Signals | null,
    readonly stderr: string,
  ) {
    super(`Switchyard exited (${code ?? signal}) before it was ready: ${stderr}`);
  }
}

/** Children launched by this test file, and whether each leads a process group of its own. */
const launched: Array<{ child: ChildProcess; detached: boolean }> = [];

/**
 * Starts Switchyard as a child process (JSON logs at `info` on stdout). Resolves once it logs
 * "Switchyard listening" (`main`) or "Switchyard worker started" (`worker`, which must never
 * listen).
 * @throws ChildStartError when it exits first; Error after 45 s without getting ready.
 */
export function launchChild(opts: ChildOptions = {}): Promise<ChildServer> {
  const entry = opts.entry ?? "main";
  const env: NodeJS.ProcessEnv =
    opts.inheritEnv === false ? { PATH: process.env.PATH, HOME: process.env.HOME } : defaultEnv(opts);
  for (const [name, value] of Object.entries(opts.env ?? {})) {
    if (value === undefined) delete env[name];
    else env[name] = value;
  }
  const detached = opts.detached ?? true;
  const child = spawn(process.execPath, ["--import", LOADER, path.join(packageRoot, `src/${entry}.ts`)], {
    cwd: opts.dataDir ?? packageRoot,
    env,
    detached,
    stdio: ["ignore", "pipe", "pipe"],
  });
  launched.push({ child, detached });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once("exit", (code, signal) => resolve({ code, signal })),
  );
  let stderr = "";
  child.stderr!.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")));
  const ready = opts.readyMessage ?? (entry === "main" ? "Switchyard listening" : "Switchyard worker started");
  return new Promise((resolve, reject) => {
    let pgPort = 0;
    let pgPid = 0;
    const timer = setTimeout(
      () => reject(new Error(`no "${ready}" after ${opts.startupTimeoutMs ?? STARTUP_TIMEOUT_MS} ms`)),
      opts.startupTimeoutMs ?? STARTUP_TIMEOUT_MS,
    );
    createInterface({ input: child.stdout! }).on("line", (line) => {
      let entry: Record<string, unknown>;
      try {
        entry = JSON.parse(line) as Record<string, unknown>;
      } catch {
        return;
      }
      opts.onLog?.(entry);
      if (entry.msg === "embedded PostgreSQL started") {
        pgPort = entry.port as number;
        pgPid = entry.postgresPid as number;
      } else if (entry.msg === ready) {
        clearTimeout(timer);
        resolve({ child, url: typeof entry.url === "string" ? entry.url : "", pgPort, pgPid, ready: entry, exited });
      } else if (entry.msg === "Switchyard listening" && opts.entry === "worker") {
        reject(new Error("a worker process must not serve HTTP"));
      }
    });
    void exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new ChildStartError(code, signal, stderr));
    });
  });
}

/** This test process's environment with the defaults of a test child (see `ChildOptions.inheritEnv`). */
function defaultEnv(opts: ChildOptions): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    PORT: "0",
    HOST: "127.0.0.1",
    LOG_LEVEL: "info",
    SWITCHYARD_MODELS_DIR: MODELS_DIR,
    SWITCHYARD_ALLOW_MODEL_DOWNLOAD: "false",
    SWITCHYARD_GPU: "off",
    // Pinned as in the harness: no tuning probe per start (issue 12, item 3).
    SWITCHYARD_ENGINE_THREADS: "1",
    SWITCHYARD_ENGINE_SEQUENCES: "8",
    SWITCHYARD_JWT_SECRET: "child-server-test-secret-child-server-test",
  };
  delete env.DATABASE_URL;
  delete env.SWITCHYARD_CONFIG;
  delete env.SWITCHYARD_ROLE;
  if (opts.dataDir) env.SWITCHYARD_DATA_DIR = opts.dataDir;
  if (opts.databaseUrl) env.DATABASE_URL = opts.databaseUrl;
  return env;
}

/**
 * Runs a script of `src/` to its end (e.g. `scripts/admin-cli.ts` with `["migrate"]`) in `cwd`
 * with exactly `env` (and `PATH`, `HOME`): its exit code and what it wrote.
 */
export function runScript(
  script: string,
  args: string[],
  env: Record<string, string>,
  cwd: string,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, ["--import", LOADER, path.join(packageRoot, "src", script), ...args], {
    cwd,
    env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (c: Buffer) => (stdout += c.toString("utf8")));
  child.stderr.on("data", (c: Buffer) => (stderr += c.toString("utf8")));
  // `close`, not `exit`: a child's exit can come before its output has all been read.
  return new Promise((resolve) => child.once("close", (code) => resolve({ code, stdout, stderr })));
}

/** SIGKILLs every child launched by this test file that is still running (its whole group when detached). */
export function killChildren(): void {
  for (const { child, detached } of launched.splice(0)) {
    if (child.exitCode !== null || child.signalCode !== null) continue;
    try {
      if (detached) process.kill(-child.pid!, "SIGKILL");
      else child.kill("SIGKILL");
    } catch {
      /* gone */
    }
  }
}

/** True while `pid` is a live process (not a zombie). */
export function alive(pid: number): boolean {
  try {
    const state = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.[0];
    return state !== undefined && state !== "Z";
  } catch {
    return false;
  }
}

/** SQL as the superuser against the embedded cluster of `dataDir` on `pgPort` (the password lives beside the cluster). */
export async function embeddedSql<T>(
  dataDir: string,
  pgPort: number,
  text: string,
  params: unknown[] = [],
): Promise<T[]> {
  const password = readFileSync(path.join(dataDir, "pg.password"), "utf8").trim();
  const client = new pg.Client({ host: "127.0.0.1", port: pgPort, user: "postgres", password, database: "switchyard" });
  await client.connect();
  try {
    return (await client.query(text, params)).rows as T[];
  } finally {
    await client.end();
  }
}

/**
 * After a test file: kills its children, shuts down an embedded PostgreSQL a child left running
 * in `dataDir` (a test failed half-way), and removes the folder.
 */
export async function cleanUpChildren(dataDir?: string): Promise<void> {
  killChildren();
  if (!dataDir) return;
  const lockFile = path.join(dataDir, "pg", "postmaster.pid");
  const pid = existsSync(lockFile) ? Number.parseInt(readFileSync(lockFile, "utf8"), 10) : 0;
  if (pid > 0 && alive(pid)) {
    try {
      process.kill(pid, "SIGQUIT");
    } catch {
      /* gone */
    }
    await eventually(async () => !alive(pid), 10_000);
  }
  rmSync(dataDir, { recursive: true, force: true });
}
