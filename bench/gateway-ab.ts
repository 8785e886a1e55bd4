/**
 * Before/after of one gateway-path change on a shared, noisy machine: two builds of Switchyard
 * (A: a copy of an earlier `dist-bench`, B: the current one) run side by side in front of the
 * same bench upstream, and the load alternates between them in short slices, so both see the
 * same minutes of background load. Per slice: req/s (closed loop, 50 connections), Switchyard's
 * own CPU ms per request and its PostgreSQL's; then the near-idle p50 (100 req/s, one connection)
 * and the streamed time to first token, also alternated. Prints medians over the slices.
 *
 *   cp -r dist-bench dist-base   # before the change; then change, rebuild, and:
 *   node dist-bench/bench/gateway-ab.js dist-base        # A = dist-base, B = this build
 *   node dist-bench/bench/gateway-ab.js dist-base dist-x # A = dist-base, B = dist-x
 *   AB_ROUNDS=6 AB_SLICE_S=3 AB_METERING=off node dist-bench/bench/gateway-ab.js dist-base
 *   AB_B_ENV='{"SWITCHYARD_DURABILITY":"process"}' node dist-bench/bench/gateway-ab.js dist-bench dist-bench
 *                                  # one build, a setting of B's environment as the change
 */
import { type ChildProcess, spawn } from "node:child_process";
import { chmodSync, mkdtempSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import autocannon from "autocannon";
import { Pool } from "undici";
import { cpuSeconds, descendantsCpuSeconds } from "./proc-stats.js";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");
const ROUNDS = Number(process.env.AB_ROUNDS ?? 6);
const SLICE_S = Number(process.env.AB_SLICE_S ?? 3);
const MODEL = "bench-model";
const BODY = JSON.stringify({
  model: MODEL,
  messages: [{ role: "user", content: "Say hello to the benchmark." }],
  max_tokens: 16,
});
const STREAM_BODY = JSON.stringify({
  model: MODEL,
  messages: [{ role: "user", content: "Say hello to the benchmark. [bench:gap=20]" }],
  max_tokens: 16,
  stream: true,
});

const dbCpu = descendantsCpuSeconds;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

function waitForLine<T>(child: ChildProcess, match: (e: Record<string, unknown>) => T | undefined): Promise<T> {
  return new Promise((resolve, reject) => {
    let done = false;
    createInterface({ input: child.stdout! }).on("line", (line) => {
      if (done) return;
      try {
        const found = match(JSON.parse(line) as Record<string, unknown>);
        if (found !== undefined) {
          done = true;
          resolve(found);
        }
      } catch {
        /* not JSON */
      }
    });
    child.once("exit", (code) => !done && reject(new Error(`child exited with ${code}`)));
  });
}

async function post<T>(url: string, body: unknown, token?: string): Promise<T> {
  const res = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", ...(token ? { authorization: `Bearer ${token}` } : {}) },
    body: JSON.stringify(body),
  });
  if (!res.ok) throw new Error(`${url}: ${res.status} ${await res.text()}`);
  return res.json() as Promise<T>;
}

interface Side {
  name: string;
  child: ChildProcess;
  url: string;
  headers: Record<string, string>;
}

async function start(name: string, dist: string, upstreamPort: number, extraEnv = {}): Promise<Side> {
  const dir = mkdtempSync(path.join(os.tmpdir(), `switchyard-ab-${name}-`));
  chmodSync(dir, 0o755);
  const catalog = path.join(dir, "catalog.json");
  writeFileSync(
    catalog,
    JSON.stringify({
      default_model: MODEL,
      models: [
        {
          id: MODEL,
          display_name: "Bench model (upstream)",
          provider: "bench",
          modality: "text_generation",
          context_tokens: 4096,
          pricing: { input_per_million_usd: 0.05, output_per_million_usd: 0.05 },
          engine: { type: "openai_compatible" },
        },
      ],
    }),
  );
  const child = spawn(process.execPath, [path.join(root, dist, "bench/gateway-switchyard.js")], {
    cwd: dir,
    env: {
      ...process.env,
      PORT: "0",
      HOST: "127.0.0.1",
      LOG_LEVEL: "info",
      SWITCHYARD_DATA_DIR: path.join(dir, "data"),
      SWITCHYARD_CATALOG: catalog,
      SWITCHYARD_UPSTREAMS: JSON.stringify([
        { name: "bench", base_url: `http://127.0.0.1:${upstreamPort}/v1`, models: [MODEL], max_concurrency: 256 },
      ]),
      ...extraEnv,
    },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const url = await waitForLine(child, (e) => (e.msg === "Switchyard listening" ? (e.url as string) : undefined));
  child.stdout!.resume();
  const signup = await post<{ access_token: string }>(`${url}/control/v1/auth/signup`, {
    email: `ab-${Date.now()}@example.com`,
    password: "bench-password",
  });
  const key = await post<{ plaintext: string }>(`${url}/control/v1/auth/api-keys`, { name: "ab" }, signup.access_token);
  if (process.env.AB_METERING === "off") child.kill("SIGUSR2");
  return {
    name,
    child,
    url,
    headers: { "content-type": "application/json", authorization: `Bearer ${key.plaintext}` },
  };
}

async function closed(side: Side, seconds: number) {
  const pid = side.child.pid!;
  const cpu0 = cpuSeconds(pid);
  const db0 = dbCpu(pid);
  const r = await autocannon({
    url: `${side.url}/v1/chat/completions`,
    method: "POST",
    headers: side.headers,
    body: BODY,
    connections: 50,
    duration: seconds,
  });
  const n = Math.max(1, r.requests.total);
  return {
    rps: r.requests.total / (r.duration || seconds),
    cpuMs: (1000 * (cpuSeconds(pid) - cpu0)) / n,
    dbMs: (1000 * (dbCpu(pid) - db0)) / n,
    errors: r.non2xx + r.errors,
  };
}

async function idle(side: Side, seconds: number): Promise<number> {
  const url = new URL(`${side.url}/v1/chat/completions`);
  const pool = new Pool(url.origin, { connections: 1 });
  const lat: number[] = [];
  const start = performance.now() + 10;
  const pending: Promise<void>[] = [];
  for (let i = 0; i < seconds * 100; i++) {
    const at = start + i * 10;
    await new Promise((r) => setTimeout(r, Math.max(0, at - performance.now())));
    pending.push(
      pool.request({ method: "POST", path: url.pathname, headers: side.headers, body: BODY }).then(async (res) => {
        await res.body.arrayBuffer();
        lat.push(performance.now() - at);
      }),
    );
  }
  await Promise.all(pending);
  await pool.close();
  return median(lat);
}

async function ttft(side: Side, n: number): Promise<number> {
  const url = new URL(`${side.url}/v1/chat/completions`);
  const pool = new Pool(url.origin, { connections: 1 });
  const times: number[] = [];
  for (let i = 0; i < n; i++) {
    const sent = performance.now();
    let first = NaN;
    const res = await pool.request({ method: "POST", path: url.pathname, headers: side.headers, body: STREAM_BODY });
    let seen = "";
    for await (const part of res.body) {
      if (Number.isNaN(first)) {
        seen += (part as Buffer).toString("utf8");
        if (/"content":"[^"]/.test(seen)) first = performance.now() - sent;
      }
    }
    times.push(first);
  }
  await pool.close();
  return median(times);
}

async function main(): Promise<void> {
  const baseDist = process.argv[2] ?? "dist-base";
  const up = spawn(process.execPath, [path.join(here, "gateway-upstream.js")], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const children: ChildProcess[] = [up];
  try {
    const upPort = await waitForLine(up, (e) => (typeof e.port === "number" ? e.port : undefined));
    const a = await start("A", baseDist, upPort);
    children.push(a.child);
    const bEnv = JSON.parse(process.env.AB_B_ENV ?? "{}") as Record<string, string>;
    const b = await start("B", process.argv[3] ?? path.relative(root, path.resolve(here, "..")), upPort, bEnv);
    children.push(b.child);
    for (const s of [a, b]) await closed(s, 2); // warm-up
    const rows: Record<string, { rps: number[]; cpuMs: number[]; dbMs: number[]; idle: number[]; ttft: number[] }> = {
      A: { rps: [], cpuMs: [], dbMs: [], idle: [], ttft: [] },
      B: { rps: [], cpuMs: [], dbMs: [], idle: [], ttft: [] },
    };
    for (let i = 0; i < ROUNDS; i++) {
      const order = i % 2 === 0 ? [a, b] : [b, a];
      for (const s of order) {
        const r = await closed(s, SLICE_S);
        rows[s.name].rps.push(r.rps);
        rows[s.name].cpuMs.push(r.cpuMs);
        rows[s.name].dbMs.push(r.dbMs);
      }
      for (const s of order) rows[s.name].idle.push(await idle(s, 2));
      for (const s of order) rows[s.name].ttft.push(await ttft(s, 40));
      console.error(
        `round ${i + 1}: A ${rows.A.rps.at(-1)!.toFixed(0)} req/s ${rows.A.cpuMs.at(-1)!.toFixed(3)} ms/req; ` +
          `B ${rows.B.rps.at(-1)!.toFixed(0)} req/s ${rows.B.cpuMs.at(-1)!.toFixed(3)} ms/req`,
      );
    }
    console.log(
      `\nA = ${baseDist}, B = ${process.argv[3] ?? "this build"}; medians over ${ROUNDS} alternating rounds (${SLICE_S} s closed slices, ` +
        `metering ${process.env.AB_METERING === "off" ? "off" : "on"}${process.env.AB_B_ENV ? `; B with ${process.env.AB_B_ENV}` : ""})\n`,
    );
    console.log("| build | req/s (50 conn) | CPU ms/req | DB CPU ms/req | idle p50 ms | TTFT p50 ms |");
    console.log("|---|---|---|---|---|---|");
    for (const k of ["A", "B"] as const) {
      const r = rows[k];
      console.log(
        `| ${k} | ${median(r.rps).toFixed(0)} | ${median(r.cpuMs).toFixed(3)} | ${median(r.dbMs).toFixed(3)} | ` +
          `${median(r.idle).toFixed(2)} | ${median(r.ttft).toFixed(2)} |`,
      );
    }
    const pairs = rows.A.rps.map((x, i) => rows.B.rps[i] / x);
    console.log(
      `\nB/A req/s per round: ${pairs.map((x) => x.toFixed(2)).join(" ")} (median ${median(pairs).toFixed(2)})`,
    );
  } finally {
    for (const c of children) if (c.exitCode === null) c.kill("SIGTERM");
    await Promise.all(children.map((c) => (c.exitCode === null ? new Promise((r) => c.once("exit", r)) : undefined)));
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
