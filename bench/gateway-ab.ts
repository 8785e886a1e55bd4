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
 *   AB_RATE=200 node dist-bench/bench/gateway-ab.js dist-base   # the load slices at 200 req/s, not closed
 *   AB_B_ENV='{"SWITCHYARD_DURABILITY":"process"}' node dist-bench/bench/gateway-ab.js dist-bench dist-bench
 *                                  # one build, a setting of B's environment as the change
 */
import type { ChildProcess } from "node:child_process";
import { chmodSync, mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import autocannon from "autocannon";
import { Pool } from "undici";
import { closeRequests, signup } from "./child-server.js";
import { CHAT_BODY, startGatewaySwitchyard, startUpstream, streamBody } from "./gateway-processes.js";
import { cpuSeconds, descendantsCpuSeconds } from "./proc-stats.js";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");
const ROUNDS = Number(process.env.AB_ROUNDS ?? 6);
const SLICE_S = Number(process.env.AB_SLICE_S ?? 3);
const RATE = Number(process.env.AB_RATE ?? 0);
const BODY = CHAT_BODY;
const STREAM_BODY = streamBody(20);

const dbCpu = descendantsCpuSeconds;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

interface Side {
  name: string;
  child: ChildProcess;
  url: string;
  headers: Record<string, string>;
}

async function start(name: string, dist: string, upstreamPort: number, extraEnv = {}): Promise<Side> {
  const dir = mkdtempSync(path.join(os.tmpdir(), `switchyard-ab-${name}-`));
  chmodSync(dir, 0o755);
  const { child, url } = await startGatewaySwitchyard({
    upstreamPort,
    dir,
    entry: path.join(root, dist, "bench/gateway-switchyard.js"),
    env: extraEnv,
  });
  const apiKey = await signup(url, "ab");
  if (process.env.AB_METERING === "off") child.kill("SIGUSR2");
  return {
    name,
    child,
    url,
    headers: { "content-type": "application/json", authorization: `Bearer ${apiKey}` },
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
    // A fixed rate (AB_RATE): both builds do the same work per second, so their CPU per request
    // compares without the faster one's bigger group commits (closed loop otherwise).
    ...(RATE ? { overallRate: RATE } : {}),
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
  const children: ChildProcess[] = [];
  try {
    const upstream = await startUpstream();
    children.push(upstream.child);
    const upPort = upstream.port;
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
      `\nA = ${baseDist}, B = ${process.argv[3] ?? "this build"}; medians over ${ROUNDS} alternating rounds (${SLICE_S} s ${RATE ? `slices at ${RATE} req/s` : "closed slices"}, ` +
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
    closeRequests();
    for (const c of children) if (c.exitCode === null) c.kill("SIGTERM");
    await Promise.all(children.map((c) => (c.exitCode === null ? new Promise((r) => c.once("exit", r)) : undefined)));
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
