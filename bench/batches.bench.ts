/**
 * Benchmark: batches (issue 7, Checks). Starts an embedded PostgreSQL and Switchyard as a child
 * process (`node dist-bench/src/main.js`, so its RSS is its own), and prints one table:
 *
 * 1. BENCH_ITEMS (default 5,000) chat completions (tinystories-260k, max_tokens 8) through the
 *    batch pipeline — items/s from create to terminal (the batch's own `created_at` →
 *    `completed_at`, and as seen by the client from the POST to the poll that saw it terminal) —
 *    against the same items sent as synchronous `POST /v1/chat/completions` by as many concurrent
 *    clients as the runner runs items (`SWITCHYARD_BATCH_CONCURRENCY`, BENCH_CONCURRENCY, default
 *    7 of 8 engine sequences), in the same run, as a ratio batch/sync.
 * 2. The server's RSS while it serves `GET /v1/batches/{id}/results.jsonl` for BENCH_RESULT_ITEMS
 *    (default 50,000) small finished items (rows written straight into the database): idle RSS
 *    before, peak during (VmRSS sampled every 5 ms, and VmHWM after resetting it through
 *    `/proc/<pid>/clear_refs`), bytes streamed and MB/s.
 * 3. `GET /v1/health` waits (p50/p99/max, timed back to back from a worker thread) while a
 *    BENCH_UPLOAD_ITEMS × BENCH_ITEM_BYTES (default 50,000 × 4,000 B = 200 MB) `POST /v1/batches`
 *    is uploaded and created, against the same probe when idle; and how long that create took.
 *    Target: max ≤ 250 ms.
 *
 *   npm run bench:batches
 *   BENCH_ITEMS=500 BENCH_RESULT_ITEMS=5000 BENCH_UPLOAD_ITEMS=5000 npm run bench:batches   # quick
 *   BENCH_SECTIONS=3 npm run bench:batches                                                 # one section
 *   BENCH_SERVER_NODE_ARGS="--cpu-prof --cpu-prof-dir=/tmp/prof" npm run bench:batches     # profile the server
 *
 * Model files from SWITCHYARD_MODELS_DIR (default ../shared/models). Everything (clients, prober,
 * PostgreSQL, server) shares the machine's cores: on 2 cores the numbers are floors.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { Worker } from "node:worker_threads";
import pg from "pg";
import { startEmbeddedPostgres } from "../src/db/embedded.js";
import {
  type Answer,
  type Server,
  closeRequests,
  json,
  request,
  signup,
  startServer,
  stopServer,
} from "./child-server.js";
import { printJson } from "./report.js";

const MIB = 1024 * 1024;

const ITEMS = Number(process.env.BENCH_ITEMS ?? 5_000);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 7);
const SEQUENCES = Math.max(8, CONCURRENCY + 1);
const RESULT_ITEMS = Number(process.env.BENCH_RESULT_ITEMS ?? 50_000);
const UPLOAD_ITEMS = Number(process.env.BENCH_UPLOAD_ITEMS ?? 50_000);
const ITEM_BYTES = Number(process.env.BENCH_ITEM_BYTES ?? 4_000);
/** Which sections run (BENCH_SECTIONS=1,3 …), all by default. */
const SECTIONS = new Set((process.env.BENCH_SECTIONS ?? "1,2,3").split(",").map(Number));
const MAX_TOKENS = 8;
const MODEL = "tinystories-260k";
/** Default `SWITCHYARD_BATCH_MAX_BYTES` (200 MiB); raised when the upload body is larger. */
const DEFAULT_BATCH_MAX_BYTES = 200 * MIB;

/** What every server of this bench runs with (on top of `child-server.ts`'s settings). */
const serverEnv = {
  SWITCHYARD_ENGINE_SEQUENCES: String(SEQUENCES),
  SWITCHYARD_BATCH_CONCURRENCY: String(CONCURRENCY),
};

/** The server's batch progress lines, for whoever watches the run (the table comes at the end). */
function showBatchLines(line: string): void {
  if (!/"msg":"batch (state changed|progress|created)"/.test(line)) return;
  const { level: _l, time: _t, pid: _p, hostname: _h, msg, ...rest } = JSON.parse(line) as Record<string, unknown>;
  process.stderr.write(`  server: ${String(msg)} ${JSON.stringify(rest)}\n`);
}

/** The chat body of item `i` (sync requests and batch items send the same). */
function chatBody(i: number, content?: string): Record<string, unknown> {
  return {
    model: MODEL,
    messages: [{ role: "user", content: content ?? `Once upon a time, story ${i}` }],
    max_tokens: MAX_TOKENS,
  };
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

/** VmRSS and VmHWM of a process, bytes. */
function memoryOf(pid: number): { rss: number; hwm: number } {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const kb = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, "m").exec(status)?.[1] ?? NaN) * 1024;
  return { rss: kb("VmRSS"), hwm: kb("VmHWM") };
}

/**
 * Times `GET /v1/health` back to back (5 ms apart) from a worker thread until `stop` settles;
 * returns the waits in ms. On its own thread, so the 200 MB body built and sent here cannot delay it.
 */
async function probeHealth(base: string, stop: Promise<unknown>): Promise<number[]> {
  const worker = new Worker(
    `const http = require("node:http");
     const { parentPort, workerData } = require("node:worker_threads");
     const agent = new http.Agent({ keepAlive: true });
     const waits = []; let done = false;
     parentPort.on("message", () => { done = true; });
     (async () => {
       while (!done) {
         const started = performance.now();
         await new Promise((resolve) => http.get(workerData + "/v1/health", { agent }, (res) => { res.resume(); res.on("end", resolve); }).on("error", resolve));
         waits.push(performance.now() - started);
         await new Promise((r) => setTimeout(r, 5));
       }
       agent.destroy();
       parentPort.postMessage(waits);
     })();`,
    { eval: true, workerData: base },
  );
  const result = new Promise<number[]>((resolve) => worker.once("message", resolve));
  await stop.catch(() => undefined);
  worker.postMessage("stop");
  const waits = await result;
  await worker.terminate();
  return waits.sort((a, b) => a - b);
}

interface BatchObject {
  id: string;
  status: string;
  created_at: string;
  completed_at: string | null;
  request_counts: { total: number; completed: number; failed: number; cancelled: number };
}

const isTerminal = (s: string) => s === "completed" || s === "failed" || s === "cancelled";

/** Section 1: the same items as sync requests (CONCURRENCY clients), then as one batch. */
async function throughput(server: Server, key: string) {
  const { base } = server;
  // Warm up: engine, auth cache, metering.
  for (let i = 0; i < 20; i++) {
    await json(
      request(base, "POST", "/v1/chat/completions", { body: JSON.stringify(chatBody(i)), key }),
      200,
      "warm-up",
    );
  }
  process.stderr.write(`section 1: ${ITEMS} sync requests, ${CONCURRENCY} clients …\n`);
  const latencies: number[] = [];
  let next = 0;
  const syncStarted = performance.now();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < ITEMS) {
        const i = next++;
        const t0 = performance.now();
        await json(
          request(base, "POST", "/v1/chat/completions", { body: JSON.stringify(chatBody(i)), key }),
          200,
          "chat completion",
        );
        latencies.push(performance.now() - t0);
      }
    }),
  );
  const syncS = (performance.now() - syncStarted) / 1000;
  latencies.sort((a, b) => a - b);

  process.stderr.write(`section 1: one batch of ${ITEMS} items …\n`);
  const body = JSON.stringify({
    requests: Array.from({ length: ITEMS }, (_, i) => ({
      custom_id: `item-${i}`,
      url: "/v1/chat/completions",
      body: chatBody(i),
    })),
  });
  const clientStarted = performance.now();
  const created = await json<BatchObject>(request(base, "POST", "/v1/batches", { body, key }), 201, "batch create");
  const createS = (performance.now() - clientStarted) / 1000;
  let batch = created;
  while (!isTerminal(batch.status)) {
    await new Promise((r) => setTimeout(r, 200));
    batch = await json<BatchObject>(request(base, "GET", `/v1/batches/${created.id}`, { key }), 200, "batch get");
  }
  const clientS = (performance.now() - clientStarted) / 1000;
  const serverS = (Date.parse(batch.completed_at!) - Date.parse(batch.created_at)) / 1000;
  if (batch.request_counts.completed !== ITEMS) {
    throw new Error(`batch ended ${batch.status} with counts ${JSON.stringify(batch.request_counts)}`);
  }
  return { syncS, latencies, createS, clientS, serverS, bodyBytes: Buffer.byteLength(body) };
}

/** Section 2: RSS while serving results.jsonl of RESULT_ITEMS finished items written with SQL. */
async function resultsRss(server: Server, key: string, db: pg.Client) {
  const { base, pid } = server;
  // A real batch gives the row its team and principal; the big one copies them.
  const template = await json<BatchObject>(
    request(base, "POST", "/v1/batches", {
      body: JSON.stringify({ requests: [{ custom_id: "template", url: "/v1/chat/completions", body: chatBody(0) }] }),
      key,
    }),
    201,
    "template batch",
  );
  await request(base, "POST", `/v1/batches/${template.id}/cancel`, { key });
  const [{ id }] = (
    await db.query<{ id: string }>(
      `INSERT INTO batches (id, team_id, user_id, api_key_id, principal_json, status, request_count, created_at,
                            updated_at, completed_at, expires_at)
       SELECT gen_random_uuid(), team_id, user_id, api_key_id, principal_json, 'completed', $2, now(), now(), now(),
              now() + interval '1 day'
         FROM batches WHERE id = $1
       RETURNING id`,
      [template.id, RESULT_ITEMS],
    )
  ).rows;
  await db.query(
    `INSERT INTO batch_items (batch_id, idx, request_id, custom_id, url, body_json, status, result_json, started_at,
                              completed_at)
     SELECT $1, g, gen_random_uuid(), 'item-' || g, '/v1/chat/completions',
            jsonb_build_object('model', $3::text, 'max_tokens', 8,
                               'messages', jsonb_build_array(jsonb_build_object('role', 'user', 'content', 'Once'))),
            'completed',
            jsonb_build_object('id', 'chatcmpl-' || gen_random_uuid(), 'object', 'chat.completion',
                               'created', 1760000000, 'model', $3::text,
                               'choices', jsonb_build_array(jsonb_build_object(
                                 'index', 0, 'finish_reason', 'length',
                                 'message', jsonb_build_object('role', 'assistant', 'content', 'Once upon a time, there'))),
                               'usage', jsonb_build_object('prompt_tokens', 5, 'completion_tokens', 8, 'total_tokens', 13)),
            now(), now()
       FROM generate_series(0, $2 - 1) AS g`,
    [id, RESULT_ITEMS, MODEL],
  );
  await db.query("ANALYZE batch_items");

  const measure = async (pathName: string) => {
    // Settle, then the idle RSS, then reset the kernel's peak (VmHWM) to it.
    await new Promise((r) => setTimeout(r, 2000));
    const idle = memoryOf(pid).rss;
    writeFileSync(`/proc/${pid}/clear_refs`, "5");
    let sampled = idle;
    const sampler = setInterval(() => {
      sampled = Math.max(sampled, memoryOf(pid).rss);
    }, 5);
    const started = performance.now();
    let bytes = 0;
    let lines = 0;
    const status = await new Promise<number>((resolve, reject) => {
      http
        .get(base + pathName, { headers: { authorization: `Bearer ${key}` } }, (res) => {
          res.on("data", (c: Buffer) => {
            bytes += c.length;
            for (let i = c.indexOf(10); i !== -1; i = c.indexOf(10, i + 1)) lines++;
          });
          res.on("end", () => resolve(res.statusCode ?? 0));
          res.on("error", reject);
        })
        .on("error", reject);
    });
    const seconds = (performance.now() - started) / 1000;
    clearInterval(sampler);
    const hwm = memoryOf(pid).hwm;
    if (status !== 200) throw new Error(`${pathName} answered ${status}`);
    return { idle, peak: Math.max(sampled, hwm), sampled, hwm, bytes, lines, seconds };
  };
  process.stderr.write(`section 2: results.jsonl of ${RESULT_ITEMS} items …\n`);
  const jsonl = await measure(`/v1/batches/${id}/results.jsonl`);
  if (jsonl.lines !== RESULT_ITEMS) throw new Error(`results.jsonl had ${jsonl.lines} lines`);
  process.stderr.write(`section 2: results (JSON) of ${RESULT_ITEMS} items …\n`);
  const whole = await measure(`/v1/batches/${id}/results`);
  return { jsonl, whole };
}

/** The upload body: UPLOAD_ITEMS chat items of ITEM_BYTES each (padding in the prompt). */
function uploadBody(): Buffer {
  const parts: Buffer[] = [Buffer.from('{"requests":[')];
  for (let i = 0; i < UPLOAD_ITEMS; i++) {
    const item = (content: string) =>
      JSON.stringify({ custom_id: `big-${i}`, url: "/v1/chat/completions", body: chatBody(i, content) });
    const bare = Buffer.byteLength(item(""));
    const pad = "Once upon a time there was a red ball. "
      .repeat(Math.ceil(ITEM_BYTES / 39))
      .slice(0, ITEM_BYTES - bare);
    parts.push(Buffer.from((i === 0 ? "" : ",") + item(pad)));
  }
  parts.push(Buffer.from("]}"));
  return Buffer.concat(parts);
}

/** Section 3: health waits idle, then while the upload body is sent and created. */
async function healthDuringUpload(server: Server, key: string, body: Buffer) {
  const { base } = server;
  process.stderr.write("section 3: idle health probe …\n");
  const idle = await probeHealth(base, new Promise((r) => setTimeout(r, 3000)));
  process.stderr.write(`section 3: POST /v1/batches of ${(body.length / 1e6).toFixed(1)} MB …\n`);
  const started = performance.now();
  let uploadedAt = NaN;
  const create = new Promise<Answer>((resolve, reject) => {
    const req = http.request(
      `${base}/v1/batches`,
      {
        method: "POST",
        headers: { "content-type": "application/json", "content-length": body.length, authorization: `Bearer ${key}` },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks) }));
      },
    );
    req.on("finish", () => (uploadedAt = performance.now()));
    req.on("error", reject);
    req.end(body);
  });
  const during = await probeHealth(base, create);
  const answer = await create;
  const createS = (performance.now() - started) / 1000;
  const uploadS = (uploadedAt - started) / 1000;
  if (answer.status !== 201) {
    throw new Error(`big create answered ${answer.status}: ${answer.body.toString("utf8").slice(0, 300)}`);
  }
  const batch = JSON.parse(answer.body.toString("utf8")) as BatchObject;
  if (batch.request_counts.total !== UPLOAD_ITEMS) {
    throw new Error(`big create stored ${batch.request_counts.total} of ${UPLOAD_ITEMS} items`);
  }
  // It is not run here: cancel it at once.
  await request(base, "POST", `/v1/batches/${batch.id}/cancel`, { key });
  return { idle, during, createS, uploadS, items: batch.request_counts.total };
}

async function main(): Promise<void> {
  const load0 = os.loadavg();
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "switchyard-batches-bench-"));
  const pgServer = await startEmbeddedPostgres({ dir: path.join(dataDir, "pg"), database: "switchyard" });
  const db = new pg.Client({ connectionString: pgServer.url });
  await db.connect();
  if (SECTIONS.has(3)) process.stderr.write(`building the ${UPLOAD_ITEMS} × ${ITEM_BYTES} B upload body …\n`);
  const big = SECTIONS.has(3) ? uploadBody() : undefined;
  const batchMaxBytes = Math.max(DEFAULT_BATCH_MAX_BYTES, big?.length ?? 0);
  let server: Server | undefined;
  try {
    // Sections 2 and 3 on a fresh server (its idle RSS is not grown by a run), 1 on another.
    let key = "";
    let rss: Awaited<ReturnType<typeof resultsRss>> | undefined;
    let health: Awaited<ReturnType<typeof healthDuringUpload>> | undefined;
    let tp: Awaited<ReturnType<typeof throughput>> | undefined;
    if (SECTIONS.has(2) || SECTIONS.has(3)) {
      server = await startServer(
        pgServer.url,
        dataDir,
        { ...serverEnv, SWITCHYARD_BATCH_MAX_BYTES: String(batchMaxBytes) },
        showBatchLines,
      );
      key = await signup(server.base, "batches");
      if (SECTIONS.has(2)) rss = await resultsRss(server, key, db);
      if (SECTIONS.has(3)) health = await healthDuringUpload(server, key, big!);
      await stopServer(server);
    }
    if (SECTIONS.has(1)) {
      server = await startServer(pgServer.url, dataDir, serverEnv, showBatchLines);
      key ||= await signup(server.base, "batches");
      tp = await throughput(server, key);
      await stopServer(server);
    }
    server = undefined;

    const load1 = os.loadavg();
    const f1 = (n: number) => n.toFixed(1);
    const mib = (n: number) => `${(n / MIB).toFixed(1)} MiB`;
    const pct = (xs: number[]) =>
      `${percentile(xs, 50).toFixed(1)} / ${percentile(xs, 99).toFixed(1)} / ${xs[xs.length - 1].toFixed(1)}`;
    const rows: Array<[string, string, string, string]> = [];
    if (tp) {
      const batchRate = ITEMS / tp.serverS;
      const syncRate = ITEMS / tp.syncS;
      rows.push([
        `1. ${ITEMS.toLocaleString("en")} chat completions (max_tokens ${MAX_TOKENS}) as one batch, items/s`,
        `${f1(batchRate)} items/s (${f1(tp.serverS)} s created_at→completed_at; client POST→terminal seen ` +
          `${f1(tp.clientS)} s = ${f1(ITEMS / tp.clientS)} items/s; create ${tp.createS.toFixed(2)} s, ` +
          `${(tp.bodyBytes / 1e6).toFixed(1)} MB)`,
        `sync, ${CONCURRENCY} clients: ${f1(syncRate)} req/s (${f1(tp.syncS)} s; p50 ` +
          `${f1(percentile(tp.latencies, 50))} ms, p99 ${f1(percentile(tp.latencies, 99))} ms)`,
        `${(batchRate / syncRate).toFixed(2)} (client-seen ${(ITEMS / tp.clientS / syncRate).toFixed(2)})`,
      ]);
    }
    if (rss) {
      for (const [name, m] of [
        ["results.jsonl", rss.jsonl],
        ["results (JSON), right after", rss.whole],
      ] as const) {
        rows.push([
          `2. RSS serving ${name}, ${RESULT_ITEMS.toLocaleString("en")} items`,
          `peak ${mib(m.peak)} (+${mib(m.peak - m.idle)}; sampled ${mib(m.sampled)}, VmHWM ${mib(m.hwm)}); ` +
            `${(m.bytes / 1e6).toFixed(1)} MB in ${m.seconds.toFixed(2)} s = ${(m.bytes / 1e6 / m.seconds).toFixed(1)} MB/s`,
          `idle RSS ${mib(m.idle)}`,
          (m.peak / m.idle).toFixed(2),
        ]);
      }
    }
    if (health) {
      rows.push([
        `3. GET /v1/health p50 / p99 / max ms during a ${(big!.length / 1e6).toFixed(1)} MB POST /v1/batches ` +
          `(${health.items.toLocaleString("en")} items)`,
        `${pct(health.during)} (${health.during.length} probes; upload ${health.uploadS.toFixed(1)} s, ` +
          `201 after ${health.createS.toFixed(1)} s)`,
        `idle: ${pct(health.idle)} (${health.idle.length} probes)`,
        `max ${(health.during[health.during.length - 1] / health.idle[health.idle.length - 1]).toFixed(1)}× idle max`,
      ]);
    }

    console.log(
      `\nBatches bench: ${os.cpus().length} cores, engine sequences ${SEQUENCES}, SWITCHYARD_BATCH_CONCURRENCY ` +
        `${CONCURRENCY}, SWITCHYARD_BATCH_MAX_BYTES ${batchMaxBytes}; load average ${load0.map(f1).join(" ")} ` +
        `at start, ${load1.map(f1).join(" ")} at end\n`,
    );
    console.log("| measurement | result | baseline (same run) | ratio |");
    console.log("|---|---|---|---|");
    for (const r of rows) console.log(`| ${r.join(" | ")} |`);
    printJson("batches", [
      ...(tp
        ? [
            {
              figure: `batch items/s (${ITEMS} chat completions)`,
              unit: "items/s",
              baseline: ITEMS / tp.syncS,
              value: ITEMS / tp.serverS,
              target: "— (baseline: sync clients)",
              met: null,
            },
          ]
        : []),
      ...(rss
        ? [
            {
              figure: `RSS serving results.jsonl (${RESULT_ITEMS} items)`,
              unit: "MiB",
              baseline: rss.jsonl.idle / MIB,
              value: rss.jsonl.peak / MIB,
              target: "— (baseline: idle RSS)",
              met: null,
            },
          ]
        : []),
      ...(health
        ? [
            {
              figure: "GET /v1/health max wait during a large batch create",
              unit: "ms",
              baseline: health.idle[health.idle.length - 1],
              p50: percentile(health.during, 50),
              value: health.during[health.during.length - 1],
              target: "max ≤ 250 ms",
              met: health.during[health.during.length - 1] <= 250,
            },
          ]
        : []),
    ]);
    if (health) {
      const worst = health.during[health.during.length - 1];
      console.log(
        worst <= 250
          ? "\nhealth answered within 250 ms throughout the create"
          : `\nhealth waited ${worst.toFixed(0)} ms at worst during the create (target ≤ 250 ms)`,
      );
    }
  } finally {
    if (server) await stopServer(server).catch(() => undefined);
    closeRequests();
    await db.end().catch(() => undefined);
    await pgServer.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
