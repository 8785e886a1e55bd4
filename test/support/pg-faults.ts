/**
 * A PostgreSQL of one test file's own, to freeze, stop and start again under traffic (issue 28,
 * item 7: the standing database fault tests). The run's shared cluster cannot be frozen: every
 * other test file uses it. This one is the embedded PostgreSQL Switchyard itself starts
 * (`src/db/embedded.ts`), in a temp folder, fsync off. Freezing sends SIGSTOP to the postmaster
 * and each of its children at once (backends, workers: each leads a session of its own, so no
 * group signal reaches them all): connections stay open and the kernel still accepts new ones,
 * but nothing answers. Thawing sends SIGCONT to the same processes.
 */
import { mkdtempSync, readFileSync, readdirSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import pg from "pg";
import { type EmbeddedDatabase, startEmbeddedPostgres } from "../../src/db/embedded.js";
import type { TestServer } from "./harness.js";

export interface FaultyPostgres {
  /** URL of its `switchyard` database (stays the same across `stop` and `start`). */
  url: string;
  /** SIGSTOP to the postmaster's process group. */
  freeze(): void;
  /** SIGCONT to it. */
  thaw(): void;
  /** Fast shutdown (as `pg_ctl stop -m fast`), thawing it first. */
  stop(): Promise<void>;
  /** Starts it again on the same folder and port. */
  start(): Promise<void>;
  /** SQL on a connection of its own (assertions). */
  query<T = Record<string, unknown>>(sql: string, params?: unknown[]): Promise<T[]>;
  /** What `startTestServer` takes to run a Switchyard on this database (its `shareWith`). */
  share(): TestServer;
  /** Thaws and stops it for good. */
  close(): Promise<void>;
}

/** The processes whose parent is `pid` (Linux: `/proc/<pid>/stat`). */
function childrenOf(pid: number): number[] {
  const children: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      // pid (comm) state ppid …: comm may hold spaces and parentheses, so read after the last ")".
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      if (ppid === pid) children.push(Number(entry));
    } catch {
      /* exited meanwhile */
    }
  }
  return children;
}

/** SIGSTOP to `pid`; false when it is gone. */
function stop(pid: number): boolean {
  try {
    process.kill(pid, "SIGSTOP");
    return true;
  } catch {
    return false;
  }
}

/** Starts a PostgreSQL of its own in a temp folder (a few seconds: `initdb`). */
export async function startFaultyPostgres(): Promise<FaultyPostgres> {
  const dir = path.join(mkdtempSync(path.join(os.tmpdir(), "switchyard-faults-")), "pg");
  const launch = (port?: number) => startEmbeddedPostgres({ dir, database: "switchyard", ephemeral: true, port });
  let db: EmbeddedDatabase = await launch();
  let frozen: number[] = [];
  const faulty: FaultyPostgres = {
    url: db.url,
    freeze() {
      // Listed first, then stopped in one go (the postmaster first, so it forks nothing more), so
      // the whole server stops within microseconds, as a paused machine would; then whatever the
      // postmaster forked between the listing and its stop.
      const listed = childrenOf(db.pid);
      frozen = [db.pid, ...listed];
      for (const pid of frozen) stop(pid);
      for (const pid of childrenOf(db.pid)) if (!listed.includes(pid) && stop(pid)) frozen.push(pid);
    },
    thaw() {
      for (const pid of frozen) {
        try {
          process.kill(pid, "SIGCONT");
        } catch {
          /* gone */
        }
      }
      frozen = [];
    },
    async stop() {
      faulty.thaw();
      await db.stop();
    },
    async start() {
      db = await launch(db.port);
    },
    async query<T>(sql: string, params: unknown[] = []): Promise<T[]> {
      const client = new pg.Client({ connectionString: db.url });
      await client.connect();
      try {
        return (await client.query(sql, params)).rows as T[];
      } finally {
        await client.end();
      }
    },
    share() {
      return { databaseUrl: faulty.url, db: (sql, params) => faulty.query(sql, params) } as TestServer;
    },
    async close() {
      await faulty.stop();
    },
  };
  return faulty;
}
