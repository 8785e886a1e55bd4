/**
 * SIGKILL safety of background responses (issue 6, item 2): Switchyard runs as a child process
 * (`node src/main.ts` through SWC, as test/restart.test.ts does) on the embedded PostgreSQL of its
 * own data folder; it is killed with SIGKILL while background responses are queued and
 * generating, restarted, and every accepted response must reach a terminal status with one
 * activity row and at most one charge.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import pg from "pg";
import { packageRoot } from "../src/config/config.js";
import { CHAT_MODEL, MODELS_DIR, createTestCaller, eventually, http } from "./support/harness.js";

const LOADER = path.join(packageRoot, "test/support/swc-loader.mjs");

interface Running {
  child: ChildProcess;
  url: string;
  pgPort: number;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

const launched: ChildProcess[] = [];
let dataDir: string;

/** Starts `node src/main.ts` (role `all`) on `dataDir`; resolves once it logs "Switchyard listening". */
function launch(): Promise<Running> {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    PORT: "0",
    HOST: "127.0.0.1",
    LOG_LEVEL: "info",
    SWITCHYARD_DATA_DIR: dataDir,
    SWITCHYARD_MODELS_DIR: MODELS_DIR,
    SWITCHYARD_ALLOW_MODEL_DOWNLOAD: "false",
    SWITCHYARD_JWT_SECRET: "bg-restart-test-secret-bg-restart-test-secret",
    SWITCHYARD_WORKER_CONCURRENCY: "2",
  };
  delete env.DATABASE_URL;
  delete env.SWITCHYARD_CONFIG;
  delete env.SWITCHYARD_ROLE;
  const child = spawn(process.execPath, ["--import", LOADER, path.join(packageRoot, "src/main.ts")], {
    cwd: dataDir,
    env,
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
  });
  launched.push(child);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once("exit", (code, signal) => resolve({ code, signal })),
  );
  let stderr = "";
  child.stderr!.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")));
  return new Promise((resolve, reject) => {
    let pgPort = 0;
    const timer = setTimeout(() => reject(new Error("no 'Switchyard listening' after 45 s")), 45_000);
    createInterface({ input: child.stdout! }).on("line", (line) => {
      let entry: Record<string, unknown>;
      try {
        entry = JSON.parse(line) as Record<string, unknown>;
      } catch {
        return;
      }
      if (entry.msg === "embedded PostgreSQL started") pgPort = entry.port as number;
      else if (entry.msg === "Switchyard listening") {
        clearTimeout(timer);
        resolve({ child, url: entry.url as string, pgPort, exited });
      }
    });
    void exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`Switchyard exited (${code ?? signal}) before listening: ${stderr}`));
    });
  });
}

/** SQL against the embedded cluster (superuser; the password lives beside the cluster). */
async function sql<T>(pgPort: number, text: string, params: unknown[] = []): Promise<T[]> {
  const password = readFileSync(path.join(dataDir, "pg.password"), "utf8").trim();
  const client = new pg.Client({ host: "127.0.0.1", port: pgPort, user: "postgres", password, database: "switchyard" });
  await client.connect();
  try {
    return (await client.query(text, params)).rows as T[];
  } finally {
    await client.end();
  }
}

beforeAll(() => {
  dataDir = mkdtempSync(path.join(os.tmpdir(), "switchyard-bg-restart-"));
});

afterAll(async () => {
  for (const child of launched) {
    if (child.exitCode === null && child.signalCode === null) {
      try {
        process.kill(-child.pid!, "SIGKILL");
      } catch {
        /* gone */
      }
    }
  }
  const lockFile = path.join(dataDir, "pg", "postmaster.pid");
  const pid = existsSync(lockFile) ? Number.parseInt(readFileSync(lockFile, "utf8"), 10) : 0;
  if (pid > 0) {
    try {
      process.kill(pid, "SIGQUIT");
    } catch {
      /* gone */
    }
    await eventually(async () => !existsSync(lockFile), 10_000);
  }
  rmSync(dataDir, { recursive: true, force: true });
}, 20_000);

test("when Switchyard is SIGKILLed with background responses queued and generating, then after a restart all 20 end terminal, each with one activity row and at most one charge", async () => {
  const first = await launch();
  const caller = await createTestCaller(first.url);
  const ids: string[] = [];
  for (let i = 0; i < 20; i++) {
    const res = await http(first.url, "POST", "/v1/responses", {
      token: caller.key,
      body: { model: CHAT_MODEL, input: "Once upon a time", background: true, max_output_tokens: 200, temperature: 0 },
    });
    expect(res.status).toBe(200);
    expect(res.body.status).toBe("in_progress");
    ids.push(res.body.id);
  }
  // Kill once a worker is generating one of them (claimed, not yet recorded).
  const running = await eventually(async () => {
    const rows = await sql<{ n: number }>(
      first.pgPort,
      "SELECT count(*)::int AS n FROM responses WHERE status = 'in_progress' AND runner IS NOT NULL",
    );
    return rows[0].n > 0;
  }, 20_000);
  expect(running).toBe(true);
  process.kill(first.child.pid!, "SIGKILL");
  expect((await first.exited).signal).toBe("SIGKILL");
  // Precondition (PostgreSQL outlives the node process): some were cut off in flight.
  const [open] = await sql<{ n: number }>(
    first.pgPort,
    "SELECT count(*)::int AS n FROM responses WHERE id = ANY($1) AND status = 'in_progress'",
    [ids],
  );
  expect(open.n).toBeGreaterThan(0);

  const second = await launch();
  try {
    const allTerminal = await eventually(async () => {
      const rows = await sql<{ n: number }>(
        second.pgPort,
        "SELECT count(*)::int AS n FROM responses WHERE id = ANY($1) AND status <> 'in_progress'",
        [ids],
      );
      return rows[0].n === ids.length;
    }, 60_000);
    expect(allTerminal).toBe(true);
    for (const id of ids) {
      const read = await http(second.url, "GET", `/v1/responses/${id}`, { token: caller.key });
      expect(["completed", "incomplete"]).toContain(read.body.status);
    }
    // One activity row each, written with the terminal status; at most one charge each.
    await eventually(async () => {
      const rows = await sql<{ n: number }>(
        second.pgPort,
        "SELECT count(*)::int AS n FROM activity WHERE id = ANY($1)",
        [ids],
      );
      return rows[0].n === ids.length;
    }, 10_000);
    const perId = await sql<{ id: string; activity: number; charges: number }>(
      second.pgPort,
      `SELECT r.id::text,
              (SELECT count(*)::int FROM activity a WHERE a.id = r.id) AS activity,
              (SELECT count(*)::int FROM credit_ledger l WHERE l.type = 'usage' AND l.source_id = r.id::text) AS charges
         FROM responses r WHERE r.id = ANY($1)`,
      [ids],
    );
    expect(perId).toHaveLength(ids.length);
    for (const row of perId) {
      expect(row.activity).toBe(1);
      expect(row.charges).toBeLessThanOrEqual(1);
    }
    const [team] = await sql<{ balance: string; ledger: string }>(
      second.pgPort,
      `SELECT t.credit_balance_micros::text AS balance,
              (SELECT sum(amount_micros) FROM credit_ledger WHERE team_id = t.id)::text AS ledger
         FROM teams t WHERE t.id = $1`,
      [caller.teamId],
    );
    expect(team.balance).toBe(team.ledger);
  } finally {
    second.child.kill("SIGTERM");
    await second.exited;
  }
}, 120_000);
