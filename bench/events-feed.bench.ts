/**
 * Benchmark (issue 6, Checks): completion-events wake-up latency across processes. Two
 * Switchyards share one database; chat completions are made on B, one at a time, while on A a
 * `GET /v1/responses/events?starting_after=…&wait_ms=30000` long-poll and a graphql-ws
 * `completionEvents` subscription wait. For each completion, latency = when A's long-poll (or
 * subscription) delivered its event − when B's HTTP answer arrived (the event is committed before
 * B answers, so this is NOTIFY + wake-up + read; it can be slightly negative). Prints p50/p99 (ms).
 *
 *   npm run bench:events                # 500 completions
 *   BENCH_COMPLETIONS=2000 npm run bench:events
 *
 * Uses DATABASE_URL when set, else an embedded PostgreSQL in a temp folder; model files from
 * SWITCHYARD_MODELS_DIR (default ../shared/models).
 */
import os from "node:os";
import { createClient } from "graphql-ws";
import WebSocket from "ws";
import { startSwitchyard } from "../src/server.js";
import { benchConfig } from "./in-process.js";
import { printJson } from "./report.js";

const COMPLETIONS = Number(process.env.BENCH_COMPLETIONS ?? 500);

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

function configFor(databaseUrl?: string) {
  return benchConfig("switchyard-bench-", databaseUrl ? { databaseUrl } : {});
}

async function main(): Promise<void> {
  const a = await startSwitchyard(configFor());
  const databaseUrl = (a.dataSource.options as { url?: string }).url;
  const b = await startSwitchyard(configFor(databaseUrl));
  const ws = createClient({
    url: `${a.url.replace(/^http/, "ws")}/graphql`,
    webSocketImpl: WebSocket,
    retryAttempts: 0,
    connectionParams: async () => ({ authorization: `Bearer ${key}` }),
  });
  let key = "";
  try {
    const signup = await fetch(`${a.url}/control/v1/auth/signup`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ email: `bench-${Date.now()}@example.com`, password: "bench-password" }),
    }).then((r) => r.json() as Promise<{ access_token: string }>);
    key = await fetch(`${a.url}/control/v1/auth/api-keys`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${signup.access_token}` },
      body: JSON.stringify({ name: "bench" }),
    }).then((r) => (r.json() as Promise<{ plaintext: string }>).then((k) => k.plaintext));
    const auth = { authorization: `Bearer ${key}` };
    const complete = async () => {
      const res = await fetch(`${b.url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json", ...auth },
        body: JSON.stringify({
          model: "tinystories-260k",
          messages: [{ role: "user", content: "Once" }],
          max_tokens: 4,
        }),
      });
      if (res.status !== 200) throw new Error(`completion answered ${res.status}`);
      return (await res.json()) as { id: string };
    };
    const waitUntil = async (check: () => boolean) => {
      while (!check()) await new Promise((r) => setTimeout(r, 1));
    };

    // The feed's first event gives the long-poll its cursor.
    await complete();
    const first = await fetch(`${a.url}/v1/responses/events?limit=1`, { headers: auth }).then(
      (r) => r.json() as Promise<{ data: Array<{ completion_id: string }> }>,
    );
    let cursor = first.data[0].completion_id;

    const subscribed = new Map<string, number>();
    ws.subscribe(
      { query: "subscription { completionEvents { responseId } }" },
      {
        next: (r) => {
          const id = (r.data as { completionEvents: { responseId: string } } | null)?.completionEvents.responseId;
          if (id) subscribed.set(id, performance.now());
        },
        error: (err) => console.error("subscription error", err),
        complete: () => undefined,
      },
    );
    await waitUntil(() => a.events.subscribers > 0);

    const pollLatency: number[] = [];
    const subLatency: number[] = [];
    for (let i = 0; i < COMPLETIONS; i++) {
      const polled = fetch(`${a.url}/v1/responses/events?starting_after=${cursor}&wait_ms=30000`, {
        headers: auth,
      }).then(async (r) => ({
        at: performance.now(),
        body: (await r.json()) as { data: Array<{ completion_id: string; response_id: string }> },
      }));
      await waitUntil(() => a.events.waiting > 0);
      const made = await complete();
      const answered = performance.now();
      const poll = await polled;
      cursor = poll.body.data.at(-1)!.completion_id;
      pollLatency.push(poll.at - answered);
      const responseId = poll.body.data.at(-1)!.response_id;
      await waitUntil(() => subscribed.has(responseId));
      subLatency.push(subscribed.get(responseId)! - answered);
      if (!made.id) throw new Error("no completion id");
    }

    pollLatency.sort((x, y) => x - y);
    subLatency.sort((x, y) => x - y);
    console.log(
      `\nCompletion-event wake-up across processes: ${COMPLETIONS} chat completions on B, ` +
        `delivered on A, ${os.cpus().length} cores\n`,
    );
    console.log("| delivery on A | events | p50 ms | p90 ms | p99 ms | max ms |");
    console.log("|---|---|---|---|---|---|");
    for (const [name, xs] of [
      ["GET /v1/responses/events long-poll (wait_ms)", pollLatency],
      ["graphql-ws completionEvents subscription", subLatency],
    ] as const) {
      console.log(
        `| ${name} | ${xs.length} | ${percentile(xs, 50).toFixed(2)} | ${percentile(xs, 90).toFixed(2)} | ` +
          `${percentile(xs, 99).toFixed(2)} | ${xs.at(-1)!.toFixed(2)} |`,
      );
    }
    printJson(
      "events-feed",
      [
        ["events long-poll wake-up across processes p99", pollLatency],
        ["events subscription wake-up across processes p99", subLatency],
      ].map(([figure, xs]) => ({
        figure: figure as string,
        unit: "ms",
        p50: percentile(xs as number[], 50),
        value: percentile(xs as number[], 99),
        target: "—",
        met: null,
      })),
    );
  } finally {
    await ws.dispose();
    await b.close();
    await a.close();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
