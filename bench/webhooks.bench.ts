/**
 * Benchmark: completion-webhook first-attempt latency (issue 6, "bench/ gains"). Sends
 * BENCH_REQUESTS (default 500) chat completions with `metadata.completion_webhook` at
 * BENCH_CONCURRENCY (default 8) and measures, per request, the time from the group commit that
 * recorded it (the outbox row's `created_at`, the commit transaction's start) to the first attempt
 * arriving at a loopback receiver, and from the answer reaching the client to that arrival (can be
 * negative: the dispatcher is woken at commit, before the answer is written). Prints p50/p99 (ms).
 *
 *   npm run bench:webhooks
 *   BENCH_REQUESTS=2000 BENCH_CONCURRENCY=16 npm run bench:webhooks
 *
 * Uses DATABASE_URL when set, else an embedded PostgreSQL in a temp folder; model files from
 * SWITCHYARD_MODELS_DIR (default ../shared/models). Loopback is allowed for this run only.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import os from "node:os";
import { startSwitchyard } from "../src/server.js";
import { benchConfig } from "./in-process.js";
import { printJson } from "./report.js";

const REQUESTS = Number(process.env.BENCH_REQUESTS ?? 500);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 8);

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

async function main(): Promise<void> {
  const arrivals = new Map<string, number>();
  const receiver = http.createServer((req, res) => {
    const at = Date.now();
    req.resume();
    req.on("end", () => {
      arrivals.set(String(req.headers["webhook-id"]), at);
      res.end("ok");
    });
  });
  await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
  const hook = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
  const config = benchConfig("switchyard-bench-", { webhookAllowPrivate: true });
  const app = await startSwitchyard(config);
  try {
    const signup = await fetch(`${app.url}/control/v1/auth/signup`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ email: `bench-${Date.now()}@example.com`, password: "bench-password" }),
    }).then((r) => r.json() as Promise<{ access_token: string }>);
    const answered = new Map<string, number>();
    let next = 0;
    const started = Date.now();
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (next < REQUESTS) {
          next++;
          const res = await fetch(`${app.url}/v1/chat/completions`, {
            method: "POST",
            headers: { "content-type": "application/json", authorization: `Bearer ${signup.access_token}` },
            body: JSON.stringify({
              model: "tinystories-260k",
              messages: [{ role: "user", content: "Once upon a time" }],
              max_tokens: 8,
              metadata: { completion_webhook: hook },
            }),
          });
          const body = (await res.json()) as { id: string };
          if (res.status !== 200) throw new Error(`create answered ${res.status}`);
          answered.set(body.id, Date.now());
        }
      }),
    );
    const elapsed = (Date.now() - started) / 1000;
    for (const deadline = Date.now() + 30_000; arrivals.size < answered.size && Date.now() < deadline;) {
      await new Promise((r) => setTimeout(r, 50));
    }
    const rows = (await app.dataSource.query(
      "SELECT response_id::text AS id, extract(epoch FROM created_at) * 1000 AS committed FROM webhook_deliveries",
    )) as Array<{ id: string; committed: string }>;
    const fromCommit: number[] = [];
    const fromAnswer: number[] = [];
    for (const r of rows) {
      const webhookId = `chatcmpl-${r.id}`;
      const at = arrivals.get(webhookId);
      if (at === undefined) continue;
      fromCommit.push(at - Number(r.committed));
      fromAnswer.push(at - (answered.get(webhookId) ?? NaN));
    }
    fromCommit.sort((a, b) => a - b);
    fromAnswer.sort((a, b) => a - b);
    console.log(
      `\n${answered.size} chat completions with a webhook at concurrency ${CONCURRENCY} in ${elapsed.toFixed(1)} s ` +
        `(${(answered.size / elapsed).toFixed(1)} req/s), ${arrivals.size} webhooks received, ${os.cpus().length} cores\n`,
    );
    console.log("| first attempt after | p50 ms | p99 ms | max ms |");
    console.log("|---|---|---|---|");
    for (const [name, xs] of [
      ["commit (outbox row)", fromCommit],
      ["answer at the client", fromAnswer],
    ] as const) {
      console.log(
        `| ${name} | ${percentile(xs, 50).toFixed(1)} | ${percentile(xs, 99).toFixed(1)} | ${xs[xs.length - 1]?.toFixed(1)} |`,
      );
    }
    printJson("webhooks", [
      {
        figure: "webhook first attempt after commit p99",
        unit: "ms",
        p50: percentile(fromCommit, 50),
        value: percentile(fromCommit, 99),
        target: "—",
        met: null,
      },
    ]);
  } finally {
    await app.close();
    receiver.close();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
