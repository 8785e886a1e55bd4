/**
 * Benchmark (issue 9, Checks): Switchyard as a gateway in front of an OpenAI-compatible upstream,
 * against calling the upstream directly and against the Portkey gateway (`@portkey-ai/gateway`,
 * `--headless`) in front of the same upstream. Each runs in a process of its own on loopback:
 *
 *   upstream    `bench/gateway-upstream.ts`: plain `node:http`, one fixed chat completion with usage
 *   Switchyard  `dist-bench/src/main.js` with a catalog whose one model is `openai_compatible`,
 *               routed to the upstream; auth (API key), metering and the credit ledger on, as
 *               `npm start` runs (embedded PostgreSQL unless DATABASE_URL is set)
 *   Portkey     `x-portkey-provider: openai`, `x-portkey-custom-host: <upstream>/v1`
 *
 * Load comes from this process, the same for each target: a closed loop (autocannon, 50
 * connections, 10 s: req/s) and an open loop at a fixed 500 req/s for 10 s whose latency is
 * counted from each request's scheduled send time (so a stall counts for every request it
 * delays), reported as p50/p99/p99.9 and as what each gateway adds over the direct call; then
 * each target process's RSS. One table, with ratios to direct and to Portkey. Then (issue 12,
 * item 2) near idle: an open loop at 100 req/s on one connection (p50 added); streamed chat: time
 * to the first content token, one request at a time, the upstream waiting 20 ms after its first
 * chunk (p50 added); and Switchyard with metering off (`bench/gateway-switchyard.ts`, SIGUSR2)
 * in a closed loop between two with it on, in the same process (ratio on / off). Switchyard's CPU
 * per request (its own process, and its PostgreSQL's) and its group-commit flush sizes and times
 * (from `/metrics`) over the 50-connection run are printed too.
 *
 *   npm run bench:gateway
 *   BENCH_SECONDS=20 BENCH_RATE=1000 npm run bench:gateway
 *   BENCH_CPU_PROF=1 npm run bench:gateway   # also profiles Switchyard and prints its top costs
 *   BENCH_PORTKEY=0 …                         # without Portkey (quicker before/after runs)
 *   API_PROCESSES=1,2 npm run bench:gateway   # req/s and CPU per request with N API processes (gateway-scale.ts)
 *   BENCH_TRACING=1 npm run bench:gateway     # only: CPU per request, spans exported vs tracing off
 *                                             # (issue 29; `gateway-tracing.ts`)
 *   BENCH_TRACING=spans npm run bench:gateway # only: the in-process µs of tracing one request
 *                                             # (`tracing-spans.ts`)
 *
 * On 2 cores the load generator, the upstream and the gateway share the CPU: absolute numbers are
 * floors; the ratios are what to compare.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { chmodSync, existsSync, mkdtempSync, readFileSync, readdirSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import autocannon from "autocannon";
import { Pool } from "undici";
import { closeRequests, signup } from "./child-server.js";
import { CHAT_BODY, startGatewaySwitchyard, startUpstream, streamBody } from "./gateway-processes.js";
import { gatewayScale } from "./gateway-scale.js";
import { runTracingBench } from "./gateway-tracing.js";
import { runSpansBench } from "./tracing-spans.js";
import { cpuSeconds, descendantsCpuSeconds } from "./proc-stats.js";
import { type BenchFigure, printFigures, printJson } from "./report.js";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");
const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 50);
const RATE = Number(process.env.BENCH_RATE ?? 500);
const WARMUP_SECONDS = 2;
const CPU_PROF = process.env.BENCH_CPU_PROF === "1";
/** Extra `node` options for the Switchyard process (e.g. V8 heap flags), space-separated. */
const SWITCHYARD_NODE_ARGS = (process.env.BENCH_SWITCHYARD_NODE_ARGS ?? "").split(" ").filter(Boolean);
const BODY = CHAT_BODY;
/** Near idle (issue 12, item 2): one connection at this rate. */
const IDLE_RATE = 100;
/** How long the upstream waits after a stream's first chunk in the time-to-first-token runs, ms. */
const STREAM_GAP_MS = 20;
const STREAM_BODY = streamBody(STREAM_GAP_MS);
/** Streamed requests per target in the time-to-first-token run (one at a time). */
const STREAM_REQUESTS = Math.max(50, Math.min(300, SECONDS * 30));

interface Target {
  name: string;
  /** Full URL of the chat completions path. */
  url: string;
  headers: Record<string, string>;
  pid: number;
}

interface Measured {
  target: Target;
  rps: number;
  closedErrors: number;
  p50: number;
  p99: number;
  p999: number;
  openErrors: number;
  /** Open loop at IDLE_RATE on one connection. */
  idleP50: number;
  idleP99: number;
  /** Streamed chat: time to the first content token, one request at a time (ms). */
  ttftP50: number;
  ttftP99: number;
  /** Streamed requests that failed or sent no content (Portkey answers this upstream's streams with an error). */
  ttftErrors: number;
  /** Requests in the closed and open runs the CPU figures cover. */
  requests: number;
  rssMb: number;
  /** CPU seconds the target's process used during its two measured runs, and its descendants (a database). */
  cpuS: number;
  childCpuS: number;
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** Resident set size of `pid` in MiB (Linux /proc). */
function rssMb(pid: number): number {
  try {
    const kb = /VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1];
    return kb ? Number(kb) / 1024 : NaN;
  } catch {
    return NaN;
  }
}

/** CPU seconds of `pid` itself and of its descendants. */
function cpuOf(pid: number): { own: number; children: number } {
  return { own: cpuSeconds(pid), children: descendantsCpuSeconds(pid) };
}

/** Starts Portkey's gateway, or says why it cannot. */
async function startPortkey(): Promise<{ child: ChildProcess; port: number } | string> {
  const entry = path.join(root, "node_modules/@portkey-ai/gateway/build/start-server.js");
  if (!existsSync(entry)) return `@portkey-ai/gateway is not installed (${entry} missing; run npm install)`;
  const port = await freePort();
  const child = spawn(process.execPath, [entry, "--headless", `--port=${port}`], {
    stdio: ["ignore", "ignore", "pipe"],
    env: { ...process.env, NODE_ENV: "production" },
  });
  let stderr = "";
  child.stderr!.on("data", (c: Buffer) => (stderr += c.toString()));
  for (const deadline = Date.now() + 30_000; Date.now() < deadline;) {
    if (child.exitCode !== null) return `Portkey exited with ${child.exitCode}: ${stderr.trim().slice(0, 500)}`;
    try {
      if ((await fetch(`http://127.0.0.1:${port}/`)).ok) return { child, port };
    } catch {
      /* not yet */
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  child.kill("SIGKILL");
  return `Portkey did not answer on port ${port} within 30 s: ${stderr.trim().slice(0, 500)}`;
}

/** One request through `target`, checked, before measuring. */
async function check(target: Target): Promise<void> {
  const res = await fetch(target.url, { method: "POST", headers: target.headers, body: BODY });
  const text = await res.text();
  if (res.status !== 200 || !text.includes('"choices"')) {
    throw new Error(`${target.name} answered ${res.status}: ${text.slice(0, 300)}`);
  }
}

async function closedLoop(target: Target, seconds: number, connections: number) {
  const result = await autocannon({
    url: target.url,
    method: "POST",
    headers: target.headers,
    body: BODY,
    connections,
    duration: seconds,
  });
  return {
    rps: result.requests.total / (result.duration || seconds),
    total: result.requests.total,
    errors: result.non2xx + result.errors,
  };
}

/**
 * Sends `rate` requests a second for `seconds` on a schedule that does not wait for answers (a
 * pool of up to 512 keep-alive connections); each latency runs from the request's scheduled time
 * to the end of its answer.
 */
async function openLoop(target: Target, rate: number, seconds: number, connections = 512) {
  const url = new URL(target.url);
  const pool = new Pool(url.origin, { connections, pipelining: 1, keepAliveTimeout: 60_000 });
  const total = Math.round(rate * seconds);
  const interval = 1000 / rate;
  const latencies: number[] = [];
  let errors = 0;
  const pending: Promise<void>[] = [];
  const start = performance.now() + 20;
  let sent = 0;
  await new Promise<void>((resolve) => {
    const tick = () => {
      const now = performance.now();
      while (sent < total && start + sent * interval <= now) {
        const scheduled = start + sent * interval;
        sent++;
        pending.push(
          pool.request({ method: "POST", path: url.pathname, headers: target.headers, body: BODY }).then(
            async (res) => {
              await res.body.arrayBuffer();
              if (res.statusCode !== 200) errors++;
              latencies.push(performance.now() - scheduled);
            },
            () => {
              errors++;
            },
          ),
        );
      }
      if (sent >= total) resolve();
      else setTimeout(tick, Math.max(0, start + sent * interval - performance.now()));
    };
    tick();
  });
  await Promise.all(pending);
  await pool.close();
  latencies.sort((a, b) => a - b);
  return {
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    p999: percentile(latencies, 99.9),
    errors,
  };
}

/**
 * Streamed chat, one request at a time on one connection: from sending each request to the first
 * SSE event with non-empty `delta.content` (Switchyard's first event, the role, has none), ms.
 */
async function timeToFirstToken(
  target: Target,
  requests: number,
): Promise<{ p50: number; p99: number; errors: number }> {
  const url = new URL(target.url);
  const pool = new Pool(url.origin, { connections: 1, pipelining: 1, keepAliveTimeout: 60_000 });
  const times: number[] = [];
  let errors = 0;
  const firstContent = /"content":"[^"]/;
  for (let i = 0; i < requests; i++) {
    const sent = performance.now();
    let first = NaN;
    try {
      const res = await pool.request({
        method: "POST",
        path: url.pathname,
        headers: target.headers,
        body: STREAM_BODY,
      });
      let seen = "";
      for await (const part of res.body) {
        if (Number.isNaN(first)) {
          seen += (part as Buffer).toString("utf8");
          if (firstContent.test(seen)) first = performance.now() - sent;
        }
      }
      if (res.statusCode !== 200 || Number.isNaN(first)) errors++;
      else times.push(first);
    } catch {
      errors++;
    }
  }
  await pool.close();
  times.sort((a, b) => a - b);
  return { p50: percentile(times, 50), p99: percentile(times, 99), errors };
}

async function measure(
  target: Target,
  hooks: { before?: () => Promise<void>; between?: () => Promise<void> } = {},
): Promise<Measured> {
  await check(target);
  await closedLoop(target, WARMUP_SECONDS, 10);
  await hooks.before?.();
  const cpuBefore = cpuOf(target.pid);
  const closed = await closedLoop(target, SECONDS, CONNECTIONS);
  const cpuAfter = cpuOf(target.pid);
  await hooks.between?.();
  const cpuBeforeOpen = cpuOf(target.pid);
  const open = await openLoop(target, RATE, SECONDS);
  const cpuAfterOpen = cpuOf(target.pid);
  const idle = await openLoop(target, IDLE_RATE, SECONDS, 1);
  const ttft = await timeToFirstToken(target, STREAM_REQUESTS);
  const m: Measured = {
    target,
    rps: closed.rps,
    closedErrors: closed.errors,
    ...open,
    openErrors: open.errors + idle.errors,
    ttftErrors: ttft.errors,
    idleP50: idle.p50,
    idleP99: idle.p99,
    ttftP50: ttft.p50,
    ttftP99: ttft.p99,
    requests: closed.total + Math.round(RATE * SECONDS),
    rssMb: rssMb(target.pid),
    cpuS: cpuAfter.own - cpuBefore.own + cpuAfterOpen.own - cpuBeforeOpen.own,
    childCpuS: cpuAfter.children - cpuBefore.children + cpuAfterOpen.children - cpuBeforeOpen.children,
  };
  console.error(
    `${target.name}: ${m.rps.toFixed(0)} req/s closed; p50 ${m.p50.toFixed(2)} / p99 ${m.p99.toFixed(2)} ms at ${RATE} req/s; ` +
      `idle p50 ${m.idleP50.toFixed(2)} ms; TTFT p50 ${m.ttftP50.toFixed(2)} ms`,
  );
  return m;
}

/** Switchyard's group-commit counters (`/metrics`, loopback): flushes, rows, seconds so far. */
async function flushCounters(base: string): Promise<{ flushes: number; rows: number; seconds: number }> {
  const text = await (await fetch(`${base}/metrics`)).text();
  const read = (name: string) => Number(new RegExp(`^${name} (\\S+)$`, "m").exec(text)?.[1] ?? NaN);
  return {
    flushes: read("switchyard_metering_flushes_total"),
    rows: read("switchyard_metering_flush_rows_total"),
    seconds: read("switchyard_metering_flush_seconds_total"),
  };
}

/** Sends SIGUSR2 to the bench Switchyard (`gateway-switchyard.ts`) and waits until metering is `want`. */
async function setMetering(child: ChildProcess, want: "on" | "off"): Promise<void> {
  const rl = createInterface({ input: child.stdout! });
  const switched = new Promise<void>((resolve) =>
    rl.on("line", (line) => {
      try {
        if ((JSON.parse(line) as { bench_metering?: string }).bench_metering === want) resolve();
      } catch {
        /* a log line */
      }
    }),
  );
  child.kill("SIGUSR2");
  await switched;
  rl.close();
  child.stdout!.resume();
}

/**
 * The busy part of a V8 `.cpuprofile` (idle samples left out: the profile spans the whole process,
 * also while the other targets are measured): the top self-time functions, and self time summed
 * per package or source file, as shares of the busy samples.
 */
function topCosts(file: string, n: number): { busyS: number; functions: string[]; modules: string[] } {
  const profile = JSON.parse(readFileSync(file, "utf8")) as {
    nodes: Array<{ id: number; callFrame: { functionName: string; url: string; lineNumber: number } }>;
    samples: number[];
    startTime: number;
    endTime: number;
  };
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const self = new Map<string, number>();
  const modules = new Map<string, number>();
  let busy = 0;
  for (const id of profile.samples) {
    const f = byId.get(id)!.callFrame;
    if (f.functionName === "(idle)") continue;
    busy++;
    const url = f.url.replace(/^file:\/\//, "");
    const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url)?.[1];
    const where = pkg ? `${pkg}:${url.split(`${pkg}/`)[1]}` : url.replace(/.*\/dist-[^/]+\//, "");
    const fn = `${f.functionName || "(anonymous)"} ${where ? `${where}:${f.lineNumber + 1}` : ""}`.trim();
    self.set(fn, (self.get(fn) ?? 0) + 1);
    // Node's own modules by folder (`node:internal/streams`), ours by file, packages by name.
    const mod = pkg ?? (where.startsWith("node:") ? where.replace(/\/[^/]*$/, "") : where || f.functionName);
    modules.set(mod, (modules.get(mod) ?? 0) + 1);
  }
  const top = (m: Map<string, number>) =>
    [...m.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, n)
      .map(([key, count]) => `${((100 * count) / busy).toFixed(1).padStart(5)} %  ${key}`);
  const sampleS = (profile.endTime - profile.startTime) / 1e6 / Math.max(1, profile.samples.length);
  return { busyS: busy * sampleS, functions: top(self), modules: top(modules) };
}

async function main(): Promise<void> {
  if (process.env.API_PROCESSES) {
    const counts = process.env.API_PROCESSES.split(",").map(Number);
    return gatewayScale(counts, SECONDS, CONNECTIONS);
  }
  const dir = mkdtempSync(path.join(os.tmpdir(), "switchyard-bench-gateway-"));
  // The embedded PostgreSQL may run as another user (as root, it runs as `postgres`): it must reach its folder.
  chmodSync(dir, 0o755);
  const children: ChildProcess[] = [];
  try {
    const upstream = await startUpstream();
    children.push(upstream.child);
    const upstreamV1 = `http://127.0.0.1:${upstream.port}/v1`;
    const nodeArgs = [...SWITCHYARD_NODE_ARGS];
    if (CPU_PROF) nodeArgs.push("--cpu-prof", `--cpu-prof-dir=${path.join(dir, "profile")}`);
    const switchyard = await startGatewaySwitchyard({ upstreamPort: upstream.port, dir, nodeArgs });
    children.push(switchyard.child);
    const apiKey = await signup(switchyard.url, "bench");
    const portkey = process.env.BENCH_PORTKEY === "0" ? "skipped (BENCH_PORTKEY=0)" : await startPortkey();
    if (typeof portkey !== "string") children.push(portkey.child);

    const jsonHeaders = { "content-type": "application/json" };
    const targets: Target[] = [
      {
        name: "direct",
        url: `${upstreamV1}/chat/completions`,
        headers: { ...jsonHeaders, authorization: "Bearer bench" },
        pid: upstream.child.pid!,
      },
      {
        name: "Switchyard",
        url: `${switchyard.url}/v1/chat/completions`,
        headers: { ...jsonHeaders, authorization: `Bearer ${apiKey}` },
        pid: switchyard.child.pid!,
      },
    ];
    if (typeof portkey !== "string") {
      targets.push({
        name: "Portkey",
        url: `http://127.0.0.1:${portkey.port}/v1/chat/completions`,
        headers: {
          ...jsonHeaders,
          authorization: "Bearer bench",
          "x-portkey-provider": "openai",
          "x-portkey-custom-host": upstreamV1,
        },
        pid: portkey.child.pid!,
      });
    }
    const results: Measured[] = [];
    // Switchyard's extras: flush counters over its 50-connection run, then metering off between
    // two closed runs with it on (same process, same minutes), before its open loop.
    let flushBefore = { flushes: NaN, rows: NaN, seconds: NaN };
    let flushAfter = flushBefore;
    const metering = { on: [] as number[], off: NaN, onCpuMsPerReq: [] as number[], offCpuMsPerReq: NaN };
    const switchyardHooks = {
      before: async () => {
        flushBefore = await flushCounters(switchyard.url);
      },
      between: async () => {
        flushAfter = await flushCounters(switchyard.url);
        const pid = switchyard.child.pid!;
        const run = async () => {
          const cpu = cpuOf(pid).own;
          const r = await closedLoop(targets[1], SECONDS, CONNECTIONS);
          return { rps: r.rps, cpuMsPerReq: (1000 * (cpuOf(pid).own - cpu)) / Math.max(1, r.total) };
        };
        await setMetering(switchyard.child, "off");
        await closedLoop(targets[1], 1, 10);
        const off = await run();
        await setMetering(switchyard.child, "on");
        const on = await run();
        metering.off = off.rps;
        metering.offCpuMsPerReq = off.cpuMsPerReq;
        metering.on.push(on.rps);
        metering.onCpuMsPerReq.push(on.cpuMsPerReq);
      },
    };
    for (const target of targets) {
      results.push(await measure(target, target.name === "Switchyard" ? switchyardHooks : {}));
    }

    const direct = results[0];
    const pk = results.find((r) => r.target.name === "Portkey");
    const sy = results.find((r) => r.target.name === "Switchyard")!;
    const f = (v: number, digits = 2) => (Number.isFinite(v) ? v.toFixed(digits) : "—");
    console.log(
      `\nPOST /v1/chat/completions through each target, ${os.cpus().length} cores; closed loop ${CONNECTIONS} ` +
        `connections ${SECONDS} s; open loop ${RATE} req/s ${SECONDS} s (latency from the scheduled send); ` +
        `near idle: ${IDLE_RATE} req/s on 1 connection ${SECONDS} s; TTFT: ${STREAM_REQUESTS} streamed requests one at a time\n`,
    );
    printFigures(
      results,
      [
        "target",
        "req/s (closed)",
        "× direct",
        "× Portkey",
        "p50 ms",
        "p99 ms",
        "p99.9 ms",
        "p50 added",
        "p99 added",
        "p99.9 added",
        "idle p50",
        "idle p50 added",
        "TTFT p50",
        "TTFT p50 added",
        "errors",
        "RSS MiB",
        "CPU ms/req",
        "DB CPU ms/req",
      ],
      (r) => {
        const added = (v: number, base: number) => (r === direct ? "—" : f(v - base));
        return [
          r.target.name,
          f(r.rps, 0),
          f(r.rps / direct.rps),
          pk ? f(r.rps / pk.rps) : "—",
          f(r.p50),
          f(r.p99),
          f(r.p999),
          added(r.p50, direct.p50),
          added(r.p99, direct.p99),
          added(r.p999, direct.p999),
          f(r.idleP50),
          added(r.idleP50, direct.idleP50),
          f(r.ttftP50),
          added(r.ttftP50, direct.ttftP50),
          String(r.closedErrors + r.openErrors),
          f(r.rssMb, 0),
          f((1000 * r.cpuS) / r.requests, 3),
          r.childCpuS > 0 ? f((1000 * r.childCpuS) / r.requests, 3) : "—",
        ];
      },
    );
    const meteringOn = (sy.rps + metering.on[0]) / 2;
    const meteringRatio = meteringOn / metering.off;
    const flushes = flushAfter.flushes - flushBefore.flushes;
    console.log(
      `\nSwitchyard metering on/off (closed loop, ${CONNECTIONS} connections, runs on → off → on in one process): ` +
        `on ${f(sy.rps, 0)} and ${f(metering.on[0], 0)} req/s (CPU ${f(metering.onCpuMsPerReq[0], 3)} ms/req), ` +
        `off ${f(metering.off, 0)} req/s (CPU ${f(metering.offCpuMsPerReq, 3)} ms/req): on/off ${f(meteringRatio)}`,
    );
    console.log(
      `Group commit over the ${CONNECTIONS}-connection run: ${flushes} flushes, ` +
        `${f((flushAfter.rows - flushBefore.rows) / flushes, 1)} rows and ` +
        `${f((1000 * (flushAfter.seconds - flushBefore.seconds)) / flushes)} ms per flush`,
    );
    const addedP99 = sy.p99 - direct.p99;
    const idleAdded = sy.idleP50 - direct.idleP50;
    const ttftAdded = sy.ttftP50 - direct.ttftP50;
    const figures: BenchFigure[] = [
      {
        figure: `gateway req/s vs direct (${CONNECTIONS} connections)`,
        unit: "req/s",
        baseline: direct.rps,
        value: sy.rps,
        target: "≥ 0.13 × direct",
        met: sy.rps >= 0.13 * direct.rps,
      },
      pk
        ? {
            figure: `gateway req/s vs Portkey (${CONNECTIONS} connections)`,
            unit: "req/s",
            baseline: pk.rps,
            value: sy.rps,
            target: "≥ 5 × Portkey",
            met: sy.rps >= 5 * pk.rps,
          }
        : {
            figure: `gateway req/s vs Portkey: not measured (${portkey as string})`,
            unit: "req/s",
            value: sy.rps,
            target: "≥ 5 × Portkey",
            met: null,
          },
      {
        figure: `gateway p99 at ${RATE} req/s open loop (baseline: direct)`,
        unit: "ms",
        baseline: direct.p99,
        p50: sy.p50,
        value: sy.p99,
        ratio: addedP99,
        target: "added ≤ 5 ms (ratio column: ms added)",
        met: addedP99 <= 5,
      },
      {
        figure: `gateway p50 near idle (${IDLE_RATE} req/s, 1 connection; baseline: direct)`,
        unit: "ms",
        baseline: direct.idleP50,
        p50: sy.idleP50,
        value: sy.idleP50,
        ratio: idleAdded,
        target: "p50 added ≤ 1.2 ms (ratio column: ms added)",
        met: idleAdded <= 1.2,
      },
      {
        figure: `gateway req/s metering on vs off (${CONNECTIONS} connections)`,
        unit: "req/s",
        baseline: metering.off,
        value: meteringOn,
        target: "≥ 0.7 × metering off",
        met: meteringRatio >= 0.7,
      },
      {
        figure: "gateway streamed time to first token (baseline: direct)",
        unit: "ms",
        baseline: direct.ttftP50,
        p50: sy.ttftP50,
        value: sy.ttftP50,
        ratio: ttftAdded,
        target: "p50 added ≤ 1 ms (ratio column: ms added)",
        met: ttftAdded <= 1,
      },
      ...(pk
        ? [
            {
              figure: "gateway RSS after the runs (baseline: Portkey)",
              unit: "MiB",
              baseline: pk.rssMb,
              value: sy.rssMb,
              target: "≤ Portkey's",
              met: sy.rssMb <= pk.rssMb,
            },
          ]
        : []),
    ];
    // Issue 30's targets: each against Portkey in this run (or, for metering, the same process off).
    const cpuPerReq = (r: Measured) => (1000 * (r.cpuS + r.childCpuS)) / r.requests;
    figures.push(
      ...(pk
        ? [
            {
              figure: `issue 30: gateway req/s vs Portkey (${CONNECTIONS} connections)`,
              unit: "req/s",
              baseline: pk.rps,
              value: sy.rps,
              target: "≥ 3 × Portkey",
              met: sy.rps >= 3 * pk.rps,
            },
            {
              figure: `issue 30: p50 added near idle (${IDLE_RATE} req/s, 1 connection) vs Portkey's added`,
              unit: "ms",
              baseline: pk.idleP50 - direct.idleP50,
              value: idleAdded,
              ratio: idleAdded / (pk.idleP50 - direct.idleP50),
              target: "≤ 0.5 × Portkey's",
              met: idleAdded <= 0.5 * (pk.idleP50 - direct.idleP50),
            },
            {
              figure: `issue 30: p99 added at ${RATE} req/s open loop vs Portkey's added`,
              unit: "ms",
              baseline: pk.p99 - direct.p99,
              value: addedP99,
              ratio: addedP99 / (pk.p99 - direct.p99),
              target: "≤ 0.25 × Portkey's",
              met: addedP99 <= 0.25 * (pk.p99 - direct.p99),
            },
            {
              figure: "issue 30: CPU ms per request, Switchyard + its PostgreSQL vs Portkey's process",
              unit: "ms",
              baseline: cpuPerReq(pk),
              value: cpuPerReq(sy),
              target: "≤ 0.3 × Portkey's",
              met: cpuPerReq(sy) <= 0.3 * cpuPerReq(pk),
            },
          ]
        : []),
      {
        figure: `issue 30: gateway req/s metering on vs off (${CONNECTIONS} connections)`,
        unit: "req/s",
        baseline: metering.off,
        value: meteringOn,
        target: "≥ 0.85 × metering off",
        met: meteringRatio >= 0.85,
      },
    );
    console.log("\nTargets (issue 9; issue 12, item 2; issue 30):");
    for (const fig of figures) {
      const shown = fig.ratio ?? (fig.baseline ? fig.value / fig.baseline : NaN);
      console.log(
        `  ${fig.figure}: ${fig.target}: ${fig.met === null ? "not measured" : fig.met ? "met" : "MISSED"} (${f(shown)})`,
      );
    }
    console.log(
      "  RSS and CPU ms/req are each target's own process over its closed and open runs; DB CPU ms/req is\n" +
        "  Switchyard's embedded PostgreSQL (its metering and ledger writes), not in RSS.",
    );
    for (const r of results.filter((x) => x.ttftErrors > 0)) {
      console.log(
        `  ${r.target.name}: ${r.ttftErrors} of ${STREAM_REQUESTS} streamed requests failed (TTFT from the rest)`,
      );
    }
    printJson("gateway", figures);
    if (CPU_PROF) {
      switchyard.child.kill("SIGTERM");
      await new Promise((resolve) => switchyard.child.once("exit", resolve));
      const profDir = path.join(dir, "profile");
      const file = readdirSync(profDir).find((name) => name.endsWith(".cpuprofile"));
      if (file) {
        const costs = topCosts(path.join(profDir, file), 20);
        console.log(
          `\nSwitchyard CPU profile (${path.join(profDir, file)}): ${costs.busyS.toFixed(1)} s busy; ` +
            "self time as a share of it, by function:",
        );
        for (const line of costs.functions) console.log(`  ${line}`);
        console.log("by package or source file:");
        for (const line of costs.modules) console.log(`  ${line}`);
      }
    }
  } finally {
    closeRequests();
    for (const child of children) if (child.exitCode === null) child.kill("SIGTERM");
    await Promise.all(
      children.map((c) => (c.exitCode === null ? new Promise((resolve) => c.once("exit", resolve)) : undefined)),
    );
  }
}

const run = { "1": runTracingBench, spans: runSpansBench }[process.env.BENCH_TRACING ?? ""] ?? main;
run().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
