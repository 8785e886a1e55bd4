/**
 * Benchmark: engine scheduling (issue 12, item 3). Starts an embedded PostgreSQL and Switchyard as
 * a child process (`node dist-bench/src/main.js`, threads and sequences `auto` unless
 * SWITCHYARD_ENGINE_THREADS / _SEQUENCES are set), and prints one table:
 *
 * 1. The engine's choice: threads and sequences, and the tokens/s the start-up probe measured for
 *    each (from the server's `engine tuning` log line).
 * 2. Interactive latency: BENCH_INTERACTIVE (default 300) chat completions (tinystories-260k,
 *    max_tokens 16) from one client, back to back, on the idle server; then the same client while
 *    one batch of BENCH_ITEMS (default 5,000) chat completions (max_tokens 16) runs, until the
 *    batch ends. Target: p99 during the batch ≤ 2 × idle p99. Measured in two layouts, each on a
 *    fresh database: one `SWITCHYARD_ROLE=all` process (the batch bounded by
 *    SWITCHYARD_BATCH_WHILE_INTERACTIVE), and an `api` process with a `worker` process beside it
 *    that runs the batch at a lower CPU priority (SWITCHYARD_WORKER_NICE).
 *
 * Throughput at concurrency 1, 8 and 32 (server and in-process engine) is the chat-completions
 * bench's (BENCH_CONCURRENCY default 1,8,32).
 *
 *   npm run bench:scheduling
 *   BENCH_ITEMS=500 BENCH_INTERACTIVE=100 npm run bench:scheduling     # quick
 *   SWITCHYARD_BATCH_CONCURRENCY=3 npm run bench:scheduling            # another batch concurrency
 *   BENCH_SPLIT=0 npm run bench:scheduling   # only one `all` process
 *   BENCH_SPLIT=1 npm run bench:scheduling   # only an API process and a worker process (batches
 *                                            # run there, at SWITCHYARD_WORKER_NICE, default 10)
 *
 * Model files from SWITCHYARD_MODELS_DIR (default ../shared/models). Client, PostgreSQL and server
 * share the machine's cores.
 */
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { startEmbeddedPostgres } from "../src/db/embedded.js";
import { type Server, closeRequests, json, request, signup, startServer, stopServer } from "./child-server.js";
import { percentile, printFigures, printJson } from "./report.js";

const ITEMS = Number(process.env.BENCH_ITEMS ?? 5_000);
const INTERACTIVE = Number(process.env.BENCH_INTERACTIVE ?? 300);
const MAX_TOKENS = 16;
const MODEL = "tinystories-260k";
/** The target: interactive p99 during the batch at most this many times the idle p99. */
const TARGET_RATIO = 2;
/**
 * Layouts measured, each on a fresh database: one `all` process (false) and an `api` process with
 * a `worker` process beside it running the batch (true). BENCH_SPLIT=0 or 1 measures only one.
 */
const LAYOUTS = process.env.BENCH_SPLIT === "0" ? [false] : process.env.BENCH_SPLIT === "1" ? [true] : [false, true];

/** The fields of the server's `engine tuning for <file>` log line (`EngineTuning`). */
interface TuningLine {
  threads?: number;
  sequences?: number;
  source?: string;
  probeMs?: number;
  threadsTokensPerS?: Record<string, number>;
  sequencesTokensPerS?: Record<string, number>;
}

function chatBody(i: number): Record<string, unknown> {
  return {
    model: MODEL,
    messages: [{ role: "user", content: `Once upon a time, story ${i}` }],
    max_tokens: MAX_TOKENS,
  };
}

/** One interactive chat completion; its latency, ms. */
async function interactive(base: string, key: string, i: number): Promise<number> {
  const t0 = performance.now();
  await json(
    request(base, "POST", "/v1/chat/completions", { body: JSON.stringify(chatBody(i)), key }),
    200,
    "chat completion",
  );
  return performance.now() - t0;
}

interface BatchObject {
  id: string;
  status: string;
  created_at: string;
  completed_at: string | null;
  request_counts: { total: number; completed: number; failed: number };
}

const f1 = (n: number) => n.toFixed(1);
const pct = (sorted: number[]) =>
  `${f1(percentile(sorted, 50))} / ${f1(percentile(sorted, 99))} / ${f1(sorted[sorted.length - 1])}`;

/** What one layout measured. */
interface LayoutResult {
  split: boolean;
  tuning: TuningLine;
  workerNice: string;
  idle: number[];
  during: number[];
  batchS: number;
  load: number[][];
}

/**
 * One layout on a fresh database: one `all` process, or (`split`) an `api` process with a
 * `worker` process beside it, where the batch runs.
 */
async function measure(split: boolean): Promise<LayoutResult> {
  const load0 = os.loadavg();
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "switchyard-scheduling-bench-"));
  const pgServer = await startEmbeddedPostgres({ dir: path.join(dataDir, "pg"), database: "switchyard" });
  let server: Server | undefined;
  let worker: Server | undefined;
  let tuning: TuningLine | undefined;
  let workerNice = "—";
  try {
    server = await startServer(
      pgServer.url,
      dataDir,
      { SWITCHYARD_GPU: "off", ...(split ? { SWITCHYARD_ROLE: "api" } : {}) },
      (line) => {
        if (line.includes('"msg":"engine tuning for')) tuning = JSON.parse(line) as TuningLine;
      },
    );
    if (split) {
      worker = await startServer(
        pgServer.url,
        dataDir,
        { SWITCHYARD_GPU: "off", SWITCHYARD_ROLE: "worker" },
        (line) => {
          if (line.includes('"msg":"worker CPU priority'))
            workerNice = String((JSON.parse(line) as { nice: number }).nice);
        },
      );
    }
    const { base } = server;
    const key = await signup(base, "scheduling");
    for (let i = 0; i < 20; i++) await interactive(base, key, i); // warm-up

    const layout = split ? "api + worker" : "one process";
    process.stderr.write(`${layout}: idle: ${INTERACTIVE} interactive requests …\n`);
    const idle: number[] = [];
    for (let i = 0; i < INTERACTIVE; i++) idle.push(await interactive(base, key, i));
    idle.sort((a, b) => a - b);

    process.stderr.write(`${layout}: batch of ${ITEMS} items, interactive requests alongside …\n`);
    const created = await json<BatchObject>(
      request(base, "POST", "/v1/batches", {
        body: JSON.stringify({
          requests: Array.from({ length: ITEMS }, (_, i) => ({
            custom_id: `item-${i}`,
            url: "/v1/chat/completions",
            body: chatBody(i),
          })),
        }),
        key,
      }),
      201,
      "batch create",
    );
    let batch = created;
    let done = false;
    const poll = (async () => {
      while (!["completed", "failed", "cancelled", "expired"].includes(batch.status)) {
        await new Promise((r) => setTimeout(r, 500));
        batch = await json<BatchObject>(request(base, "GET", `/v1/batches/${created.id}`, { key }), 200, "poll");
      }
      done = true;
    })();
    const during: number[] = [];
    // Only requests answered while items are running count (the first poll that sees items done).
    while (!done) {
      const latency = await interactive(base, key, during.length);
      if (batch.request_counts.completed > 0 && !done) during.push(latency);
    }
    await poll;
    during.sort((a, b) => a - b);
    if (batch.request_counts.completed !== ITEMS) {
      throw new Error(`batch ended ${batch.status} with counts ${JSON.stringify(batch.request_counts)}`);
    }
    const batchS = (Date.parse(batch.completed_at!) - Date.parse(batch.created_at)) / 1000;
    return { split, tuning: tuning ?? {}, workerNice, idle, during, batchS, load: [load0, os.loadavg()] };
  } finally {
    if (worker) await stopServer(worker).catch(() => undefined);
    if (server) await stopServer(server).catch(() => undefined);
    await pgServer.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const results: LayoutResult[] = [];
  try {
    for (const split of LAYOUTS) results.push(await measure(split));
  } finally {
    closeRequests();
  }
  const t = results[0].tuning;
  const rates = (r?: Record<string, number>) =>
    r
      ? Object.entries(r)
          .map(([k, v]) => `${k}: ${Math.round(v)}`)
          .join(", ")
      : "—";
  console.log(
    `\nEngine scheduling bench: ${os.availableParallelism()} usable cores (${os.cpus()[0]?.model ?? "?"}); ` +
      `load average ${results.map((r) => r.load.map((l) => l.map(f1).join(" ")).join(" → ")).join("; ")}\n`,
  );
  const rows: string[][] = [
    ["engine threads", `${t.threads} (${t.source}${t.source === "measured" ? `, probe ${t.probeMs} ms` : ""})`],
    ["decode tokens/s by threads (1 sequence)", rates(t.threadsTokensPerS)],
    ["engine sequences", `${t.sequences}`],
    ["aggregate decode tokens/s by sequences", rates(t.sequencesTokensPerS)],
  ];
  for (const r of results) {
    const name = r.split ? `api + worker process (nice ${r.workerNice})` : "one process (SWITCHYARD_ROLE=all)";
    const ratio = percentile(r.during, 99) / percentile(r.idle, 99);
    rows.push(
      [`${name}: interactive chat p50 / p99 / max ms, idle`, `${pct(r.idle)} (${r.idle.length} requests)`],
      [
        `${name}: interactive chat p50 / p99 / max ms during a ${ITEMS}-item batch`,
        `${pct(r.during)} (${r.during.length} requests)`,
      ],
      [`${name}: p99 during / idle p99`, `${ratio.toFixed(2)} (target ≤ ${TARGET_RATIO})`],
      [`${name}: batch items/s (created → completed)`, `${f1(ITEMS / r.batchS)} (${f1(r.batchS)} s)`],
    );
  }
  printFigures(rows, ["measurement", "result"], (r) => r);
  printJson(
    "scheduling",
    results.flatMap((r) => {
      const label = r.split ? ", api + worker process" : ", one process";
      const ratio = percentile(r.during, 99) / percentile(r.idle, 99);
      return [
        {
          figure: `interactive chat p99 during a ${ITEMS}-item batch${label}`,
          unit: "ms",
          baseline: percentile(r.idle, 99),
          value: percentile(r.during, 99),
          p50: percentile(r.during, 50),
          ratio,
          target: `≤ ${TARGET_RATIO} × idle p99`,
          met: ratio <= TARGET_RATIO,
        },
        {
          figure: `batch items/s alongside interactive chat (${ITEMS} items${label})`,
          unit: "items/s",
          value: ITEMS / r.batchS,
          target: "— (reported)",
          met: null,
        },
      ];
    }),
  );
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
