/**
 * A process crash loses no batch item and runs none twice to completion (issue 7, item 7):
 * Switchyard runs as a child process on the embedded PostgreSQL of its own data folder, is
 * SIGKILLed while a 200-item batch runs, is restarted, and every item must end exactly once — one
 * activity record, one charge, one completion event, one completed result row each.
 */
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { type ChildServer, cleanUpChildren, embeddedSql, launchChild } from "./support/child-server.js";
import { CHAT_MODEL, createTestCaller, eventually, http } from "./support/harness.js";
import { writeTestCatalog } from "./support/test-catalog.js";

let dataDir: string;
let catalogPath: string;
const ITEMS = 200;

function launch(): Promise<ChildServer> {
  return launchChild({
    dataDir,
    env: {
      SWITCHYARD_JWT_SECRET: "batch-restart-test-secret-batch-restart-test",
      SWITCHYARD_BATCH_CONCURRENCY: "3",
      // Prices at which every item costs micro-USD, so every item has a charge to count.
      SWITCHYARD_CATALOG: catalogPath,
    },
  });
}

function sql<T>(pgPort: number, text: string, params: unknown[] = []): Promise<T[]> {
  return embeddedSql<T>(dataDir, pgPort, text, params);
}

beforeAll(() => {
  dataDir = mkdtempSync(path.join(os.tmpdir(), "switchyard-batch-restart-"));
  catalogPath = writeTestCatalog(CHAT_MODEL, { input: "1", cachedInput: "0.5", output: "2" });
});

afterAll(() => cleanUpChildren(dataDir), 20_000);

test("when Switchyard is SIGKILLed mid-batch, then after a restart all 200 items end exactly once: one activity record, one charge, one event each", async () => {
  const first = await launch();
  const caller = await createTestCaller(first.url);
  const requests = Array.from({ length: ITEMS }, (_, i) => ({
    custom_id: `item-${i}`,
    body: {
      model: CHAT_MODEL,
      messages: [{ role: "user", content: `Once upon a time ${i}` }],
      max_tokens: 24,
      temperature: 0,
    },
  }));
  const created = await http(first.url, "POST", "/v1/batches", { token: caller.key, body: { requests } });
  expect(created.status).toBe(201);
  const batchId = created.body.id as string;

  // Kill once some items are done and others not (the runner holds items in flight).
  const midRun = await eventually(async () => {
    const [row] = await sql<{ done: number }>(
      first.pgPort,
      "SELECT count(*)::int AS done FROM batch_items WHERE batch_id = $1 AND status = 'completed'",
      [batchId],
    );
    return row.done >= 10;
  }, 60_000);
  expect(midRun).toBe(true);
  process.kill(first.child.pid!, "SIGKILL");
  expect((await first.exited).signal).toBe("SIGKILL");
  const [cut] = await sql<{ open: number }>(
    first.pgPort,
    "SELECT count(*)::int AS open FROM batch_items WHERE batch_id = $1 AND status IN ('pending', 'running')",
    [batchId],
  );
  // Precondition: the crash left unfinished items behind.
  expect(cut.open).toBeGreaterThan(0);

  const second = await launch();
  try {
    let batch: any;
    const ended = await eventually(async () => {
      batch = (await http(second.url, "GET", `/v1/batches/${batchId}`, { token: caller.key })).body;
      return batch.status === "completed" || batch.status === "failed";
    }, 120_000);
    expect(ended).toBe(true);
    expect(batch).toMatchObject({
      status: "completed",
      request_counts: { total: ITEMS, completed: ITEMS, failed: 0, pending: 0, running: 0 },
    });

    const perItem = await sql<{ custom_id: string; activity: number; charges: number; events: number }>(
      second.pgPort,
      `SELECT i.custom_id,
              (SELECT count(*)::int FROM activity a WHERE a.id = i.request_id) AS activity,
              (SELECT count(*)::int FROM credit_ledger l WHERE l.type = 'usage' AND l.source_id = i.request_id::text)
                AS charges,
              (SELECT count(*)::int FROM completion_events e WHERE e.response_id = i.request_id) AS events
         FROM batch_items i WHERE i.batch_id = $1 ORDER BY i.idx`,
      [batchId],
    );
    expect(perItem).toHaveLength(ITEMS);
    for (const row of perItem) expect(row).toMatchObject({ activity: 1, charges: 1, events: 1 });
    // No activity record outside the items (a rerun would have a new id only if ids were not fixed).
    const [all] = await sql<{ n: number }>(
      second.pgPort,
      "SELECT count(*)::int AS n FROM activity WHERE batch_id = $1",
      [batchId],
    );
    expect(all.n).toBe(ITEMS);
    // Totals equal the records; the ledger still adds up to the balance.
    const [sums] = await sql<{ tokens: number; cost: number }>(
      second.pgPort,
      "SELECT sum(total_tokens)::int AS tokens, sum(cost_micros)::int AS cost FROM activity WHERE batch_id = $1",
      [batchId],
    );
    expect(batch.total_tokens).toBe(sums.tokens);
    expect(batch.total_cost_micros).toBe(sums.cost);
    const [team] = await sql<{ balance: string; ledger: string }>(
      second.pgPort,
      `SELECT t.credit_balance_micros::text AS balance,
              (SELECT sum(amount_micros) FROM credit_ledger WHERE team_id = t.id)::text AS ledger
         FROM teams t WHERE t.id = $1`,
      [caller.teamId],
    );
    expect(team.balance).toBe(team.ledger);
    const lines = (await http(second.url, "GET", `/v1/batches/${batchId}/results.jsonl`, { token: caller.key })).text
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(lines.map((l) => l.custom_id)).toEqual(requests.map((r) => r.custom_id));
    for (const l of lines) expect(l.status).toBe("completed");
  } finally {
    second.child.kill("SIGTERM");
    await second.exited;
  }
}, 240_000);
