/**
 * A real PgBouncer for tests (issue 31, items 3 and 4): Debian's `pgbouncer` (`SWITCHYARD_PGBOUNCER`,
 * else `/usr/sbin/pgbouncer`; `.ci/run` installs it when missing), started by the test itself on a
 * free loopback port, as the `postgres` user when the test runs as root (PgBouncer refuses root).
 * Either with a configuration of the test's own (`startPgBouncer`: transaction pooling, trust) or
 * with the deployment's (`startDeployPgBouncer`: deploy/pgbouncer/pgbouncer.ini through its
 * entrypoint, with only the address, port and run folder changed).
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { chmodSync, chownSync, existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import pg from "pg";
import { packageRoot } from "../../src/config/config.js";
import { eventually } from "./harness.js";

export const PGBOUNCER = process.env.SWITCHYARD_PGBOUNCER ?? "/usr/sbin/pgbouncer";

/** A running PgBouncer: `url` is the PostgreSQL URL given, with PgBouncer's port. */
export interface PgBouncer {
  url: string;
  port: number;
  dir: string;
  process: ChildProcess;
  /** Everything it wrote to its log (a file, or its stderr). */
  log(): string;
  stop(): Promise<void>;
}

/** @throws Error naming the fix when the PgBouncer binary is missing. */
export function requirePgBouncer(): void {
  if (!existsSync(PGBOUNCER)) {
    throw new Error(
      `PgBouncer not found at ${PGBOUNCER}: install Debian's pgbouncer (sudo apt-get install -y pgbouncer; ` +
        `.ci/run does it) or point SWITCHYARD_PGBOUNCER at a pgbouncer binary`,
    );
  }
}

/** A free loopback TCP port. */
export async function freePort(): Promise<number> {
  const srv = net.createServer();
  await new Promise<void>((resolve) => srv.listen(0, "127.0.0.1", resolve));
  const { port } = srv.address() as net.AddressInfo;
  await new Promise((resolve) => srv.close(resolve));
  return port;
}

/** A folder the user PgBouncer runs as can write (`postgres`'s when we are root). */
function runFolder(): { dir: string; asUser: { uid: number; gid: number } | undefined } {
  const dir = mkdtempSync(path.join(os.tmpdir(), "switchyard-pgbouncer-"));
  if (process.getuid?.() !== 0) return { dir, asUser: undefined };
  const id = (flag: string) => Number.parseInt(execFileSync("id", [flag, "postgres"], { encoding: "utf8" }), 10);
  const asUser = { uid: id("-u"), gid: id("-g") };
  chownSync(dir, asUser.uid, asUser.gid);
  chmodSync(dir, 0o755);
  return { dir, asUser };
}

/**
 * Spawns `command` (PgBouncer, or its entrypoint) as the run folder's user and resolves once a
 * client gets `SELECT 1` through `probeUrl` (default `url`).
 * @throws Error with PgBouncer's log when it does not accept connections within 10 s.
 */
async function launch(
  folder: ReturnType<typeof runFolder>,
  port: number,
  url: string,
  command: string,
  args: string[],
  env: NodeJS.ProcessEnv,
  logFile?: string,
  probeUrl = url,
): Promise<PgBouncer> {
  let stderr = "";
  const child = spawn(command, args, {
    env,
    stdio: ["ignore", "ignore", "pipe"],
    ...(folder.asUser ?? {}),
  });
  child.stderr!.on("data", (c: Buffer) => (stderr += c.toString("utf8")));
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const log = () => (logFile && existsSync(logFile) ? readFileSync(logFile, "utf8") : "") + stderr;
  const ready = await eventually(async () => {
    if (child.exitCode !== null) return false;
    const c = new pg.Client({ connectionString: probeUrl });
    c.on("error", () => undefined);
    try {
      await c.connect();
      await c.query("SELECT 1");
      return true;
    } catch {
      return false;
    } finally {
      await c.end().catch(() => undefined);
    }
  }, 10_000);
  if (!ready) {
    child.kill("SIGKILL");
    throw new Error(`PgBouncer did not accept connections on port ${port}:\n${log()}`);
  }
  return {
    url,
    port,
    dir: folder.dir,
    process: child,
    log,
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      await exited;
    },
  };
}

/** `directUrl` with another host and port. */
function withAddress(directUrl: string, host: string, port: number): string {
  const url = new URL(directUrl);
  url.hostname = host;
  url.port = String(port);
  return url.toString();
}

/**
 * Starts PgBouncer with a configuration of the test's own: transaction pooling of every database
 * of the PostgreSQL at `directUrl`'s host, clients trusted.
 */
export async function startPgBouncer(directUrl: string): Promise<PgBouncer> {
  const pgUrl = new URL(directUrl);
  const folder = runFolder();
  const port = await freePort();
  writeFileSync(path.join(folder.dir, "userlist.txt"), `"${pgUrl.username}" "${decodeURIComponent(pgUrl.password)}"\n`);
  const logFile = path.join(folder.dir, "pgbouncer.log");
  writeFileSync(
    path.join(folder.dir, "pgbouncer.ini"),
    [
      "[databases]",
      `* = host=${pgUrl.hostname} port=${pgUrl.port}`,
      "[pgbouncer]",
      "listen_addr = 127.0.0.1",
      `listen_port = ${port}`,
      "unix_socket_dir =",
      "auth_type = trust",
      `auth_file = ${path.join(folder.dir, "userlist.txt")}`,
      "pool_mode = transaction",
      "max_client_conn = 500",
      "default_pool_size = 20",
      // node-postgres and the database settings of this build may send these at connect.
      "ignore_startup_parameters = extra_float_digits,options",
      `logfile = ${logFile}`,
      "",
    ].join("\n"),
  );
  const url = withAddress(directUrl, "127.0.0.1", port);
  // The probe goes to another database, so the test's database has no server connection yet
  // when the app first connects (as in a fresh deployment): PgBouncer keeps the probe's open, and a
  // session opened before the app sets its role's timeouts would not have them.
  const probe = new URL(url);
  probe.pathname = "/postgres";
  return launch(folder, port, url, PGBOUNCER, [path.join(folder.dir, "pgbouncer.ini")], {}, logFile, probe.toString());
}

/**
 * Starts PgBouncer as the deployment does (issue 31, item 4): deploy/pgbouncer/entrypoint.sh with
 * `env` (the compose service's `DB_HOST`, `DB_USER`, …) and deploy/pgbouncer/pgbouncer.ini, of
 * which only the listening address (127.0.0.1), the port (a free one) and the run folder (a
 * temporary one) are changed. `url` connects as `clientUrl`'s user to its database through it.
 */
export async function startDeployPgBouncer(env: Record<string, string>, clientUrl: string): Promise<PgBouncer> {
  const folder = runFolder();
  const port = await freePort();
  const ini = readFileSync(path.join(packageRoot, "deploy/pgbouncer/pgbouncer.ini"), "utf8")
    .replace(/^listen_addr\s*=.*$/m, () => "listen_addr = 127.0.0.1")
    .replace(/^listen_port\s*=.*$/m, () => `listen_port = ${port}`)
    .replaceAll("/run/pgbouncer", () => folder.dir);
  const config = path.join(folder.dir, "pgbouncer.ini");
  writeFileSync(config, ini);
  const url = withAddress(clientUrl, "127.0.0.1", port);
  return launch(folder, port, url, "/bin/sh", [path.join(packageRoot, "deploy/pgbouncer/entrypoint.sh")], {
    PATH: `${path.dirname(PGBOUNCER)}:${process.env.PATH}`,
    ...env,
    PGBOUNCER_CONFIG: config,
    PGBOUNCER_RUN_DIR: folder.dir,
  });
}
