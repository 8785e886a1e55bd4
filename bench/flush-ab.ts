/**
 * Before/after of the metering group commit on a shared, noisy machine (issue 30, item 2): two
 * builds of Switchyard (A: a copy of an earlier `dist-bench`, B: this one), each on its own
 * embedded PostgreSQL in this one process, each metering two real chat completions to capture its
 * own flush statement of the common shape, then running it through its own `queryPrepared` (its
 * real round trips, on its own guarded pool), alternating call by call so both see the same load.
 * Per build: p50/p90 of one flush and its PostgreSQL's CPU per flush, from /proc: all of it (the
 * postmaster and every process of it: autovacuum, WAL and background writers, checkpointer) and
 * its client backends alone (the flush's own work, and the service's few other queries). Every flush inserts and charges `AB_ROWS` new requests (fresh ids).
 *
 *   cp -r dist-bench .scratch/dist-base   # before the change; then change, rebuild, and:
 *   node dist-bench/bench/flush-ab.js .scratch/dist-base
 *   AB_ROWS=20 AB_CALLS=200 node dist-bench/bench/flush-ab.js .scratch/dist-base
 */
import { readFileSync, readdirSync, rmSync } from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { v7 as uuidv7 } from "uuid";
import type { Config } from "../src/config/config.js";
import type { queryPrepared as QueryPrepared } from "../src/db/sql.js";
import type { Switchyard, startSwitchyard as StartSwitchyard } from "../src/server.js";
import type { benchConfig as BenchConfig } from "./in-process.js";
import { percentile } from "./report.js";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");
const ROWS = Number(process.env.AB_ROWS ?? 1);
const CALLS = Number(process.env.AB_CALLS ?? 400);

/** CPU clock ticks (1/100 s) `pid` has used; 0 once it is gone. */
function ticks(pid: number): number {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
    return Number(fields[11]) + Number(fields[12]);
  } catch {
    return 0;
  }
}

function children(pid: number): number[] {
  const out: number[] = [];
  for (const task of readdirSync(`/proc/${pid}/task`)) {
    const list = readFileSync(`/proc/${pid}/task/${task}/children`, "utf8").trim();
    if (list) out.push(...list.split(" ").map(Number));
  }
  return out;
}

/** A client backend (its title: `postgres: <user> <database> <address> …`), not a background process. */
function isBackend(pid: number): boolean {
  try {
    return /^postgres: \S+ \S+ \d/.test(readFileSync(`/proc/${pid}/cmdline`, "utf8"));
  } catch {
    return false;
  }
}

/** The embedded PostgreSQL's postmaster of `dataDir` (its command line names the cluster folder). */
function postmasterOf(dataDir: string): number {
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmd = readFileSync(`/proc/${entry}/cmdline`, "utf8");
      if (cmd.includes("\0-D\0") && cmd.includes(path.join(dataDir, "pg"))) return Number(entry);
    } catch {
      /* gone */
    }
  }
  throw new Error(`no PostgreSQL of ${dataDir}`);
}

interface Side {
  dist: string;
  app: Switchyard;
  dataDir: string;
  postmaster: number;
  run: () => Promise<unknown>;
  ms: number[];
  pgTicks: number;
  backendTicks: number;
}

async function start(dist: string): Promise<Side> {
  const load = (file: string) => import(pathToFileURL(path.resolve(root, dist, file)).href);
  const { startSwitchyard } = (await load("src/server.js")) as { startSwitchyard: typeof StartSwitchyard };
  const { benchConfig } = (await load("bench/in-process.js")) as { benchConfig: typeof BenchConfig };
  const { queryPrepared } = (await load("src/db/sql.js")) as { queryPrepared: typeof QueryPrepared };
  const config: Config = benchConfig("switchyard-flush-ab-");
  const app = await startSwitchyard(config);
  type Client = { query: (...a: unknown[]) => unknown };
  const pool = (
    app.dataSource.driver as unknown as {
      master: { connect: (callback?: (...a: unknown[]) => void) => Promise<Client> };
    }
  ).master;
  const captured: Array<{ text: string; values: unknown[] }> = [];
  const wrapped = new WeakSet<object>();
  const wrap = (client: Client) => {
    if (wrapped.has(client)) return client;
    wrapped.add(client);
    const query = client.query;
    client.query = (cfg: unknown, ...rest: unknown[]) => {
      const c = cfg as { name?: string; text?: string; values?: unknown[] };
      if (c?.name?.startsWith("switchyard_group_commit_")) captured.push({ text: c.text!, values: c.values! });
      return query.call(client, cfg, ...rest);
    };
    return client;
  };
  const connect = pool.connect;
  pool.connect = function capture(this: unknown, callback?: (...a: unknown[]) => void) {
    if (!callback) return connect.call(this).then(wrap);
    return connect.call(this, (...a: unknown[]) => callback(a[0], a[1] ? wrap(a[1] as Client) : a[1], a[2]));
  } as typeof pool.connect;
  const post = (url: string, body: unknown, token?: string) =>
    fetch(`${app.url}${url}`, {
      method: "POST",
      headers: { "content-type": "application/json", ...(token ? { authorization: `Bearer ${token}` } : {}) },
      body: JSON.stringify(body),
    }).then((r) => r.json() as Promise<Record<string, string>>);
  const signup = await post("/control/v1/auth/signup", {
    email: `flush-ab-${Date.now()}-${Math.random()}@example.com`,
    password: "bench-password",
  });
  const key = await post("/control/v1/auth/api-keys", { name: "ab" }, signup.access_token);
  for (let i = 0; i < 2; i++) {
    const body = { model: app.catalog.all()[0].id, messages: [{ role: "user", content: "Once upon a time" }] };
    await post("/v1/chat/completions", { ...body, max_tokens: 8 }, key.plaintext);
    await app.metering.drainAll();
  }
  pool.connect = connect;
  if (captured.length < 2) throw new Error(`${dist}: ${captured.length} group commits seen`);
  // The second flush's statement and parameters (no key's last_used_at due, as in most flushes)
  // with the first one's request (charged; the second may be free, its prompt cached by the
  // engine), and an empty key list where a build takes one.
  const flush = captured[1];
  const rows = JSON.parse(captured[0].values[0] as string) as Array<Record<string, unknown>>;
  const values = () => {
    const fresh = Array.from({ length: ROWS }, () =>
      rows.map((r) => ({ ...r, id: uuidv7(), ledger_id: uuidv7(), completion_id: uuidv7() })),
    )
      .flat()
      .sort((a, b) => ((a.id as string) < (b.id as string) ? -1 : 1));
    return [JSON.stringify(fresh), ...flush.values.slice(1).map((v) => (Array.isArray(v) ? [] : v))];
  };
  return {
    dist,
    app,
    dataDir: config.dataDir,
    postmaster: postmasterOf(config.dataDir),
    run: () => queryPrepared(app.dataSource, "switchyard_group_commit", flush.text, values()),
    ms: [],
    pgTicks: 0,
    backendTicks: 0,
  };
}

async function main(): Promise<void> {
  const sides = [await start(process.argv[2] ?? "dist-base"), await start(process.argv[3] ?? "dist-bench")];
  try {
    for (const side of sides) for (let i = 0; i < 40; i++) await side.run();
    /** [all of the cluster, its client backends] in ticks. */
    const pgTicks = (side: Side): [number, number] => {
      let all = ticks(side.postmaster);
      let backends = 0;
      for (const pid of children(side.postmaster)) {
        const t = ticks(pid);
        all += t;
        if (isBackend(pid)) backends += t;
      }
      return [all, backends];
    };
    for (let i = 0; i < CALLS; i++) {
      for (const side of i % 2 === 0 ? sides : [...sides].reverse()) {
        const before = pgTicks(side);
        const t0 = performance.now();
        await side.run();
        side.ms.push(performance.now() - t0);
        const after = pgTicks(side);
        side.pgTicks += after[0] - before[0];
        side.backendTicks += after[1] - before[1];
      }
    }
    console.log(`\n${ROWS} request(s) per flush, ${CALLS} flushes per build, alternating\n`);
    console.log("| build | p50 ms | p90 ms | PostgreSQL CPU µs/flush | of it, client backends |");
    console.log("|---|---|---|---|---|");
    for (const side of sides) {
      const sorted = [...side.ms].sort((a, b) => a - b);
      console.log(
        `| ${side.dist} | ${percentile(sorted, 50).toFixed(2)} | ${percentile(sorted, 90).toFixed(2)} | ` +
          `${((10_000 * side.pgTicks) / CALLS).toFixed(0)} | ${((10_000 * side.backendTicks) / CALLS).toFixed(0)} |`,
      );
    }
  } finally {
    for (const side of sides) {
      await side.app.close();
      rmSync(side.dataDir, { recursive: true, force: true });
    }
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
