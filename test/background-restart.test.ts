/**
 * SIGKILL safety of background responses (issue 6, item 2): Switchyard runs as a child process
 * (`node src/main.ts` through SWC, as test/restart.test.ts does) on the embedded PostgreSQL of its
 * own data folder; it is killed with SIGKILL while background responses are queued and
 * generating, restarted, and every accepted response must reach a terminal status with one
 * activity row and at most one charge.
 */
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { type ChildServer, cleanUpChildren, embeddedSql, launchChild } from "./support/child-server.js";
import { CHAT_MODEL, createTestCaller, eventually, http } from "./support/harness.js";

let dataDir: string;

/** `node src/main.ts` (role `all`) on `dataDir` and its embedded PostgreSQL. */
function launch(): Promise<ChildServer> {
  return launchChild({
    dataDir,
    env: {
      SWITCHYARD_JWT_SECRET: "bg-restart-test-secret-bg-restart-test-secret",
      SWITCHYARD_WORKER_CONCURRENCY: "2",
    },
  });
}

function sql<T>(pgPort: number, text: string, params: unknown[] = []): Promise<T[]> {
  return embeddedSql<T>(dataDir, pgPort, text, params);
}

beforeAll(() => {
  dataDir = mkdtempSync(path.join(os.tmpdir(), "switchyard-bg-restart-"));
});

afterAll(() => cleanUpChildren(dataDir), 20_000);

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
      // Alone this takes ~10 s; a machine loaded by other suites has taken over 60 s.
    }, 150_000);
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
}, 240_000);
