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
 * each target process's RSS. One table, with ratios to direct and to Portkey.
 *
 *   npm run bench:gateway
 *   BENCH_SECONDS=20 BENCH_RATE=1000 npm run bench:gateway
 *   BENCH_CPU_PROF=1 npm run bench:gateway   # also profiles Switchyard and prints its top costs
 *
 * On 2 cores the load generator, the upstream and the gateway share the CPU: absolute numbers are
 * floors; the ratios are what to compare.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { chmodSync, existsSync, mkdtempSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import autocannon from "autocannon";
import { Pool } from "undici";
import { printJson } from "./report.js";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");
const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 50);
const RATE = Number(process.env.BENCH_RATE ?? 500);
const WARMUP_SECONDS = 2;
const CPU_PROF = process.env.BENCH_CPU_PROF === "1";
const MODEL = "bench-model";
const BODY = JSON.stringify({
  model: MODEL,
  messages: [{ role: "user", content: "Say hello to the benchmark." }],
  max_tokens: 16,
});

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

/** CPU seconds (user + system) `pid` has used so far; 0 when it is gone. */
function cpuSeconds(pid: number): number {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
    return (Number(fields[11]) + Number(fields[12])) / 100; // utime, stime in clock ticks (USER_HZ = 100)
  } catch {
    return 0;
  }
}

/** Every live descendant of `pid` (e.g. an embedded PostgreSQL and its backends). */
function descendants(pid: number): number[] {
  const out: number[] = [];
  try {
    for (const task of readdirSync(`/proc/${pid}/task`)) {
      const children = readFileSync(`/proc/${pid}/task/${task}/children`, "utf8").trim();
      for (const child of children ? children.split(" ").map(Number) : []) out.push(child, ...descendants(child));
    }
  } catch {
    /* gone */
  }
  return out;
}

/** CPU seconds of `pid` itself and of its descendants. */
function cpuOf(pid: number): { own: number; children: number } {
  return { own: cpuSeconds(pid), children: descendants(pid).reduce((n, p) => n + cpuSeconds(p), 0) };
}

/** Resolves with the first stdout line `match` accepts (its parsed JSON); rejects when the child exits first. */
function waitForLine<T>(child: ChildProcess, match: (entry: Record<string, unknown>) => T | undefined): Promise<T> {
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
    child.once("exit", (code) => !done && reject(new Error(`child exited with ${code} before it was ready`)));
  });
}

async function startUpstream(): Promise<{ child: ChildProcess; port: number }> {
  const child = spawn(process.execPath, [path.join(root, "dist-bench/bench/gateway-upstream.js")], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const port = await waitForLine(child, (e) => (typeof e.port === "number" ? e.port : undefined));
  return { child, port };
}

async function startSwitchyard(upstreamPort: number, dir: string): Promise<{ child: ChildProcess; url: string }> {
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
          // 24 tokens at 0.05 µUSD: 1 µUSD a request, so every request writes a ledger charge.
          pricing: { input_per_million_usd: 0.05, output_per_million_usd: 0.05 },
          engine: { type: "openai_compatible" },
        },
      ],
    }),
  );
  const args = [path.join(root, "dist-bench/src/main.js")];
  if (CPU_PROF) args.unshift("--cpu-prof", `--cpu-prof-dir=${path.join(dir, "profile")}`);
  const child = spawn(process.execPath, args, {
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
    },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const url = await waitForLine(child, (e) =>
    e.msg === "Switchyard listening" && typeof e.url === "string" ? e.url : undefined,
  );
  child.stdout!.resume();
  return { child, url };
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

async function json<T>(url: string, body: unknown, token?: string): Promise<T> {
  const res = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", ...(token ? { authorization: `Bearer ${token}` } : {}) },
    body: JSON.stringify(body),
  });
  if (!res.ok) throw new Error(`${url}: HTTP ${res.status} ${await res.text()}`);
  return res.json() as Promise<T>;
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
  return { rps: result.requests.total / (result.duration || seconds), errors: result.non2xx + result.errors };
}

/**
 * Sends `rate` requests a second for `seconds` on a schedule that does not wait for answers (a
 * pool of up to 512 keep-alive connections); each latency runs from the request's scheduled time
 * to the end of its answer.
 */
async function openLoop(target: Target, rate: number, seconds: number) {
  const url = new URL(target.url);
  const pool = new Pool(url.origin, { connections: 512, pipelining: 1, keepAliveTimeout: 60_000 });
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

async function measure(target: Target): Promise<Measured> {
  await check(target);
  await closedLoop(target, WARMUP_SECONDS, 10);
  const cpuBefore = cpuOf(target.pid);
  const closed = await closedLoop(target, SECONDS, CONNECTIONS);
  const open = await openLoop(target, RATE, SECONDS);
  const m: Measured = {
    target,
    rps: closed.rps,
    closedErrors: closed.errors,
    ...open,
    openErrors: open.errors,
    rssMb: rssMb(target.pid),
    cpuS: 0,
    childCpuS: 0,
  };
  const cpuAfter = cpuOf(target.pid);
  m.cpuS = cpuAfter.own - cpuBefore.own;
  m.childCpuS = cpuAfter.children - cpuBefore.children;
  console.error(
    `${target.name}: ${m.rps.toFixed(0)} req/s closed; p50 ${m.p50.toFixed(2)} / p99 ${m.p99.toFixed(2)} ms at ${RATE} req/s`,
  );
  return m;
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
    const where = pkg ? `${pkg}:${url.split(`${pkg}/`)[1]}` : url.replace(/.*dist-bench\//, "");
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
  const dir = mkdtempSync(path.join(os.tmpdir(), "switchyard-bench-gateway-"));
  // The embedded PostgreSQL may run as another user (as root, it runs as `postgres`): it must reach its folder.
  chmodSync(dir, 0o755);
  const children: ChildProcess[] = [];
  try {
    const upstream = await startUpstream();
    children.push(upstream.child);
    const upstreamV1 = `http://127.0.0.1:${upstream.port}/v1`;
    const switchyard = await startSwitchyard(upstream.port, dir);
    children.push(switchyard.child);
    const signup = await json<{ access_token: string }>(`${switchyard.url}/control/v1/auth/signup`, {
      email: `bench-${Date.now()}@example.com`,
      password: "bench-password",
    });
    const key = await json<{ plaintext: string }>(
      `${switchyard.url}/control/v1/auth/api-keys`,
      { name: "bench" },
      signup.access_token,
    );
    const portkey = await startPortkey();
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
        headers: { ...jsonHeaders, authorization: `Bearer ${key.plaintext}` },
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
    for (const target of targets) results.push(await measure(target));

    const direct = results[0];
    const pk = results.find((r) => r.target.name === "Portkey");
    const sy = results.find((r) => r.target.name === "Switchyard")!;
    const f = (v: number, digits = 2) => (Number.isFinite(v) ? v.toFixed(digits) : "—");
    console.log(
      `\nPOST /v1/chat/completions through each target, ${os.cpus().length} cores; closed loop ${CONNECTIONS} ` +
        `connections ${SECONDS} s; open loop ${RATE} req/s ${SECONDS} s (latency from the scheduled send)\n`,
    );
    console.log(
      "| target | req/s (closed) | × direct | × Portkey | p50 ms | p99 ms | p99.9 ms | p50 added | p99 added | p99.9 added | errors | RSS MiB | CPU s | DB CPU s |",
    );
    console.log("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (const r of results) {
      const added = (v: number, base: number) => (r === direct ? "—" : f(v - base));
      console.log(
        `| ${r.target.name} | ${f(r.rps, 0)} | ${f(r.rps / direct.rps)} | ${pk ? f(r.rps / pk.rps) : "—"} | ` +
          `${f(r.p50)} | ${f(r.p99)} | ${f(r.p999)} | ${added(r.p50, direct.p50)} | ${added(r.p99, direct.p99)} | ` +
          `${added(r.p999, direct.p999)} | ${r.closedErrors + r.openErrors} | ${f(r.rssMb, 0)} | ${f(r.cpuS, 1)} | ${r.childCpuS > 0 ? f(r.childCpuS, 1) : "—"} |`,
      );
    }
    console.log("\nTargets (issue 9):");
    if (pk)
      console.log(
        `  Switchyard req/s ≥ 5× Portkey's: ${sy.rps >= 5 * pk.rps ? "met" : "MISSED"} (${f(sy.rps / pk.rps)}×)`,
      );
    else console.log(`  Switchyard req/s ≥ 5× Portkey's: not measured: ${portkey as string}`);
    console.log(
      `  Switchyard req/s ≥ 0.13 of direct: ${sy.rps >= 0.13 * direct.rps ? "met" : "MISSED"} (${f(sy.rps / direct.rps)})`,
    );
    console.log(
      `  p99 added at ${RATE} req/s ≤ 5 ms: ${sy.p99 - direct.p99 <= 5 ? "met" : "MISSED"} (${f(sy.p99 - direct.p99)} ms)`,
    );
    console.log(
      "  RSS and CPU s are each target's own process over its measured runs; DB CPU s is Switchyard's embedded\n" +
        "  PostgreSQL (its metering and ledger writes), not in RSS.",
    );

    printJson("gateway", [
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
        ratio: sy.p99 - direct.p99,
        target: "added ≤ 5 ms (ratio column: ms added)",
        met: sy.p99 - direct.p99 <= 5,
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
    ]);

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
    for (const child of children) if (child.exitCode === null) child.kill("SIGTERM");
    await Promise.all(
      children.map((c) => (c.exitCode === null ? new Promise((resolve) => c.once("exit", resolve)) : undefined)),
    );
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
