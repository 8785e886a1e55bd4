/**
 * `API_PROCESSES=1,2 npm run bench:gateway` (issue 31, Checks): the gateway path (fake upstream,
 * auth, metering and the ledger on) with 1, 2, … API processes (`SWITCHYARD_API_PROCESSES`, role
 * `api`: no worker process), each count in a Switchyard of its own on a fresh embedded
 * PostgreSQL. For each: closed-loop req/s (BENCH_CONNECTIONS, default 50, for BENCH_SECONDS,
 * default 10, after a 2 s warm-up), the CPU each API process used, the CPU ms per request of the
 * API processes together and of PostgreSQL; then the ratio of req/s to one process and of CPU per
 * request to one process (target: CPU per request rises ≤ 10 %).
 *
 * On a 2-core machine the load generator, the upstream, PostgreSQL and the API processes share two
 * cores, so req/s with 2 processes is bounded by the cores, not by Switchyard. The closed loop's
 * CPU per request is bounded by them too: with the cores saturated, each of 2 processes serves
 * half the requests of one, so each group commit carries half the rows and each event-loop turn
 * half the requests, and both are paid per flush and per turn, not per request. So each count
 * also runs at a fixed rate per API process (`BENCH_SCALE_RATE`, default 300 req/s each: 300 in
 * all for 1, 600 for 2), below what the cores bound, where every process does the same work per
 * second: its CPU per request says whether a second process costs anything, and judges the
 * target (the closed loop's ratio is printed beside it).
 */
import { chmodSync, mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import autocannon from "autocannon";
import { closeRequests, signup } from "./child-server.js";
import { CHAT_BODY, startGatewaySwitchyard, startUpstream } from "./gateway-processes.js";
import { cpuSeconds, descendants } from "./proc-stats.js";
import { type BenchFigure, printFigures, printJson } from "./report.js";

/** Requests per second per API process of the fixed-rate run (see the header). */
const RATE_PER_PROCESS = Number(process.env.BENCH_SCALE_RATE ?? 300);
/**
 * `BENCH_SCALE_TOTAL_RATE`: load every count at this many req/s in all instead (the same offered
 * load on the machine, spread over 1 or 2 processes), the other way to read the target.
 */
const TOTAL_RATE = process.env.BENCH_SCALE_TOTAL_RATE ? Number(process.env.BENCH_SCALE_TOTAL_RATE) : undefined;
/** Fixed-rate rounds, alternating the counts (`BENCH_SCALE_ROUNDS`): CPU per request is the median. */
const ROUNDS = Number(process.env.BENCH_SCALE_ROUNDS ?? 5);

interface Row {
  processes: number;
  rps: number;
  errors: number;
  apiCpuMsPerReq: number;
  perProcessCpuS: number[];
  pgCpuMsPerReq: number;
  /** The fixed-rate run (`RATE_PER_PROCESS` × processes req/s): API CPU ms per request. */
  ratedCpuMsPerReq: number;
  ratedRps: number;
  ratedPgCpuMsPerReq: number;
  /** CPU ms per request of each fixed-rate round. */
  ratedRounds: number[];
  /** The median over the rounds of this count's CPU per request ÷ one process's in the same round. */
  ratedRatio: number;
}

/** One Switchyard of the scale mode: `processes` API processes, loaded through `target`. */
interface Target {
  processes: number;
  stop: () => Promise<void>;
  measure: (rate?: number) => Promise<{
    rps: number;
    errors: number;
    cpuMsPerReq: number;
    used: number[];
    pgCpuMsPerReq: number;
  }>;
}

/** Starts a Switchyard with `n` API processes (role api) in front of `upstreamPort`, warmed up. */
async function startTarget(n: number, upstreamPort: number, seconds: number, connections: number): Promise<Target> {
  const dir = mkdtempSync(path.join(os.tmpdir(), `switchyard-bench-scale-${n}-`));
  chmodSync(dir, 0o755);
  const sy = await startGatewaySwitchyard({
    upstreamPort,
    dir,
    env: { SWITCHYARD_API_PROCESSES: String(n), SWITCHYARD_ROLE: "api" },
    readyMessage: n > 1 ? "Switchyard supervisor ready" : "Switchyard listening",
  });
  const stop = async () => {
    const exited = new Promise((r) => sy.child.once("exit", r));
    sy.child.kill("SIGTERM");
    await exited;
  };
  try {
    const key = await signup(sy.url, "bench-scale");
    const target = {
      url: `${sy.url}/v1/chat/completions`,
      method: "POST" as const,
      headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
      body: CHAT_BODY,
    };
    await autocannon({ ...target, connections: 10, duration: 2 });
    const pids =
      n > 1
        ? (sy.ready.pids as Array<{ role: string; pid: number }>).filter((p) => p.role === "api").map((p) => p.pid)
        : [sy.child.pid!];
    // PostgreSQL: every descendant of the started process that is not an API process.
    const pgPids = descendants(sy.child.pid!).filter((p) => !pids.includes(p));
    const cpu = () => pids.map(cpuSeconds);
    const pgCpu = () => pgPids.reduce((sum, p) => sum + cpuSeconds(p), 0);
    const measure = async (rate?: number) => {
      const before = cpu();
      const pgBefore = pgCpu();
      const r = await autocannon({ ...target, connections, duration: seconds, ...(rate ? { overallRate: rate } : {}) });
      const used = cpu().map((c, i) => c - before[i]);
      const total = Math.max(1, r.requests.total);
      return {
        rps: r.requests.total / (r.duration || seconds),
        errors: r.non2xx + r.errors,
        cpuMsPerReq: (1000 * used.reduce((a, b) => a + b, 0)) / total,
        used,
        pgCpuMsPerReq: (1000 * (pgCpu() - pgBefore)) / total,
      };
    };
    return { processes: n, stop, measure };
  } catch (err) {
    await stop();
    throw err;
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** Runs the scale mode for the counts in `counts`; prints its table and BENCH_JSON line. */
export async function gatewayScale(counts: number[], seconds: number, connections: number): Promise<void> {
  const upstream = await startUpstream();
  const rows: Row[] = [];
  const targets: Target[] = [];
  try {
    // Every count's Switchyard runs from the start, so the fixed-rate rounds can alternate.
    for (const n of counts) targets.push(await startTarget(n, upstream.port, seconds, connections));
    const closed = [];
    for (const t of targets) closed.push(await t.measure());
    const rated = targets.map(() => [] as Array<Awaited<ReturnType<Target["measure"]>>>);
    for (let round = 0; round < ROUNDS; round++) {
      for (const [i, t] of targets.entries()) {
        const r = await t.measure(TOTAL_RATE ?? RATE_PER_PROCESS * t.processes);
        rated[i].push(r);
        console.log(
          `${t.processes} API process(es) at ${TOTAL_RATE ?? RATE_PER_PROCESS * t.processes} req/s, round ${round + 1}: CPU ${r.cpuMsPerReq.toFixed(3)} ms/req`,
        );
      }
    }
    for (const [i, t] of targets.entries()) {
      rows.push({
        processes: t.processes,
        rps: closed[i].rps,
        errors: closed[i].errors + rated[i].reduce((sum, r) => sum + r.errors, 0),
        apiCpuMsPerReq: closed[i].cpuMsPerReq,
        perProcessCpuS: closed[i].used,
        pgCpuMsPerReq: closed[i].pgCpuMsPerReq,
        ratedCpuMsPerReq: median(rated[i].map((r) => r.cpuMsPerReq)),
        ratedRps: median(rated[i].map((r) => r.rps)),
        ratedPgCpuMsPerReq: median(rated[i].map((r) => r.pgCpuMsPerReq)),
        ratedRounds: rated[i].map((r) => r.cpuMsPerReq),
        ratedRatio: median(rated[i].map((r, round) => r.cpuMsPerReq / rated[0][round].cpuMsPerReq)),
      });
    }
  } finally {
    for (const t of targets) await t.stop();
    closeRequests();
    upstream.child.kill("SIGTERM");
  }
  const one = rows[0];
  const f = (v: number, d = 2) => (Number.isFinite(v) ? v.toFixed(d) : "—");
  console.log(
    `\nGateway path with N API processes (role api, fake upstream, metering on), ${os.cpus().length} cores; ` +
      `closed loop ${connections} connections ${seconds} s; then ${ROUNDS} rounds alternating the counts at ` +
      `${TOTAL_RATE ? `${TOTAL_RATE} req/s in all` : `${RATE_PER_PROCESS} req/s per API process`} ${seconds} s each (medians; × 1 process: median of the rounds' ratios)\n`,
  );
  printFigures(
    rows,
    [
      "API processes",
      "req/s",
      "× 1 process",
      "CPU ms/req (API)",
      "× 1 process",
      "CPU s per process",
      "PG CPU ms/req",
      TOTAL_RATE ? `at ${TOTAL_RATE}/s in all: req/s` : `at ${RATE_PER_PROCESS}/s each: req/s`,
      "CPU ms/req (API)",
      "× 1 process",
      "PG CPU ms/req",
      "errors",
    ],
    (r) => [
      String(r.processes),
      f(r.rps, 0),
      f(r.rps / one.rps),
      f(r.apiCpuMsPerReq, 3),
      f(r.apiCpuMsPerReq / one.apiCpuMsPerReq),
      r.perProcessCpuS.map((c) => f(c, 1)).join(" / "),
      f(r.pgCpuMsPerReq, 3),
      f(r.ratedRps, 0),
      f(r.ratedCpuMsPerReq, 3),
      f(r.ratedRatio),
      f(r.ratedPgCpuMsPerReq, 3),
      String(r.errors),
    ],
  );
  const figures: BenchFigure[] = rows.slice(1).flatMap((r) => [
    {
      figure: `gateway req/s, ${r.processes} API processes ÷ 1`,
      unit: "req/s",
      value: r.rps,
      baseline: one.rps,
      ratio: r.rps / one.rps,
      target: "bounded by the cores (reported)",
      met: null,
    },
    {
      figure: `gateway CPU ms per request, closed loop, ${r.processes} API processes ÷ 1`,
      unit: "ms",
      value: r.apiCpuMsPerReq,
      baseline: one.apiCpuMsPerReq,
      ratio: r.apiCpuMsPerReq / one.apiCpuMsPerReq,
      target: "reported (bounded by the cores: half the rows per flush and requests per turn)",
      met: null,
    },
    {
      figure: `gateway CPU ms per request at ${TOTAL_RATE ? `${TOTAL_RATE} req/s in all` : `${RATE_PER_PROCESS} req/s per process`}, ${r.processes} API processes ÷ 1`,
      unit: "ms",
      value: r.ratedCpuMsPerReq,
      baseline: one.ratedCpuMsPerReq,
      ratio: r.ratedRatio,
      target: "≤ 1.10 × one process (median of the rounds' ratios)",
      met: r.ratedRatio <= 1.1,
    },
  ]);
  printJson("gateway-scale", figures);
}
