/**
 * Benchmark (issue 6, Checks): background responses against synchronous ones for the same work.
 * The same BENCH_REQUESTS (default 500) small `POST /v1/responses` (embedded model, 8 output
 * tokens) are sent (a) synchronously at BENCH_CONCURRENCY (default 8) and (b) with `background:
 * true` at the same concurrency, then waited for until every one is terminal — through the
 * completion events feed (`starting_after` + `wait_ms` long-polls), not by polling each response.
 * Prints requests/s of each (from the first send to the last answer, or to the last terminal
 * event), the ratio background/sync, and p50/p99 of the background submit latency (send → the
 * `in_progress` answer).
 *
 *   npm run bench:background
 *   BENCH_REQUESTS=2000 BENCH_CONCURRENCY=16 SWITCHYARD_WORKER_CONCURRENCY=8 npm run bench:background
 *
 * Uses DATABASE_URL when set, else an embedded PostgreSQL in a temp folder; model files from
 * SWITCHYARD_MODELS_DIR (default ../shared/models). One process (role `all`): its own workers run
 * the background generations.
 */
import os from "node:os";
import { startSwitchyard } from "../src/server.js";
import { benchConfig } from "./in-process.js";
import { printJson } from "./report.js";

const REQUESTS = Number(process.env.BENCH_REQUESTS ?? 500);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 8);
const WARMUP = 20;
const TERMINAL = new Set(["completed", "incomplete", "failed", "cancelled"]);

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

/** Runs `task(i)` for i in [0, n) with at most `concurrency` at once. */
async function pool(n: number, concurrency: number, task: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(concurrency, n) }, async () => {
      while (next < n) await task(next++);
    }),
  );
}

async function main(): Promise<void> {
  const config = benchConfig("switchyard-bench-");
  const app = await startSwitchyard(config);
  try {
    const signup = await fetch(`${app.url}/control/v1/auth/signup`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ email: `bench-${Date.now()}@example.com`, password: "bench-password" }),
    }).then((r) => r.json() as Promise<{ access_token: string }>);
    const key = await fetch(`${app.url}/control/v1/auth/api-keys`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${signup.access_token}` },
      body: JSON.stringify({ name: "bench" }),
    }).then((r) => (r.json() as Promise<{ plaintext: string }>).then((k) => k.plaintext));
    const headers = { "content-type": "application/json", authorization: `Bearer ${key}` };
    const body = { model: "tinystories-260k", input: "Once upon a time", max_output_tokens: 8 };
    const create = async (background: boolean) => {
      const res = await fetch(`${app.url}/v1/responses`, {
        method: "POST",
        headers,
        body: JSON.stringify(background ? { ...body, background: true } : body),
      });
      const out = (await res.json()) as { id: string; status: string };
      if (res.status !== 200) throw new Error(`create answered ${res.status}: ${JSON.stringify(out)}`);
      return out;
    };

    await pool(WARMUP, CONCURRENCY, async () => void (await create(false)));

    // (a) synchronous: each answer is the finished response.
    const syncStarted = performance.now();
    await pool(REQUESTS, CONCURRENCY, async () => {
      const r = await create(false);
      if (!TERMINAL.has(r.status)) throw new Error(`synchronous answer ${r.status}`);
    });
    const syncS = (performance.now() - syncStarted) / 1000;

    // (b) background: submit all, then tail the events feed until each has its (terminal) event.
    const newest = await fetch(`${app.url}/v1/responses/events?limit=1`, { headers }).then(
      (r) => r.json() as Promise<{ data: Array<{ completion_id: string }> }>,
    );
    let cursor = newest.data[0].completion_id;
    const submitted = new Set<string>();
    const submitMs: number[] = [];
    const bgStarted = performance.now();
    await pool(REQUESTS, CONCURRENCY, async () => {
      const sent = performance.now();
      const r = await create(true);
      submitMs.push(performance.now() - sent);
      if (r.status !== "in_progress") throw new Error(`background answer ${r.status}`);
      submitted.add(r.id);
    });
    const submittedS = (performance.now() - bgStarted) / 1000;
    const ended = new Set<string>();
    const statuses = new Map<string, number>();
    while (ended.size < submitted.size) {
      const page = await fetch(`${app.url}/v1/responses/events?starting_after=${cursor}&limit=100&wait_ms=30000`, {
        headers,
      }).then(
        (r) => r.json() as Promise<{ data: Array<{ completion_id: string; response_id: string; status: string }> }>,
      );
      if (page.data.length === 0) throw new Error(`no event for 30 s; ${submitted.size - ended.size} still open`);
      for (const e of page.data) {
        if (!submitted.has(e.response_id)) continue;
        ended.add(e.response_id);
        statuses.set(e.status, (statuses.get(e.status) ?? 0) + 1);
      }
      cursor = page.data.at(-1)!.completion_id;
    }
    const bgS = (performance.now() - bgStarted) / 1000;
    // Every one reads back terminal.
    for (const id of [...submitted].slice(0, 20)) {
      const r = (await fetch(`${app.url}/v1/responses/${id}`, { headers }).then((x) => x.json())) as { status: string };
      if (!TERMINAL.has(r.status)) throw new Error(`${id} still ${r.status} after its event`);
    }

    submitMs.sort((x, y) => x - y);
    const syncRps = REQUESTS / syncS;
    const bgRps = REQUESTS / bgS;
    console.log(
      `\nBackground vs synchronous POST /v1/responses: ${REQUESTS} requests (tinystories-260k, ` +
        `max_output_tokens 8) at concurrency ${CONCURRENCY}; worker concurrency ${config.workerConcurrency}, ` +
        `engine sequences ${config.engineSequences}, ${os.cpus().length} cores; background event statuses ` +
        `${JSON.stringify(Object.fromEntries(statuses))}\n`,
    );
    console.log("| mode | requests | seconds | requests/s | ratio to sync |");
    console.log("|---|---|---|---|---|");
    console.log(`| synchronous | ${REQUESTS} | ${syncS.toFixed(2)} | ${syncRps.toFixed(1)} | 1.00 |`);
    console.log(
      `| background, until all terminal | ${REQUESTS} | ${bgS.toFixed(2)} | ${bgRps.toFixed(1)} | ` +
        `${(bgRps / syncRps).toFixed(2)} |`,
    );
    console.log(
      `| background, submits only | ${REQUESTS} | ${submittedS.toFixed(2)} | ${(REQUESTS / submittedS).toFixed(1)} | ` +
        `${(REQUESTS / submittedS / syncRps).toFixed(2)} |`,
    );
    console.log("\n| background submit latency | p50 ms | p99 ms | max ms |");
    console.log("|---|---|---|---|");
    console.log(
      `| send → in_progress answer | ${percentile(submitMs, 50).toFixed(1)} | ${percentile(submitMs, 99).toFixed(1)} | ` +
        `${submitMs.at(-1)!.toFixed(1)} |`,
    );
    printJson("background", [
      {
        figure: `background responses req/s until terminal (${REQUESTS}, concurrency ${CONCURRENCY})`,
        unit: "req/s",
        baseline: syncRps,
        value: bgRps,
        target: "— (baseline: synchronous)",
        met: null,
      },
      {
        figure: "background submit latency p99",
        unit: "ms",
        p50: percentile(submitMs, 50),
        value: percentile(submitMs, 99),
        target: "—",
        met: null,
      },
    ]);
  } finally {
    await app.close();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
