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
 * cores, so req/s with 2 processes is bounded by the cores, not by Switchyard: the CPU per request
 * is the figure that says whether a second process costs anything.
 */
import { chmodSync, mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import autocannon from "autocannon";
import { closeRequests, signup } from "./child-server.js";
import { CHAT_BODY, startGatewaySwitchyard, startUpstream } from "./gateway-processes.js";
import { cpuSeconds, descendants } from "./proc-stats.js";
import { type BenchFigure, printFigures, printJson } from "./report.js";

interface Row {
  processes: number;
  rps: number;
  errors: number;
  apiCpuMsPerReq: number;
  perProcessCpuS: number[];
  pgCpuMsPerReq: number;
}

/** Runs the scale mode for the counts in `counts`; prints its table and BENCH_JSON line. */
export async function gatewayScale(counts: number[], seconds: number, connections: number): Promise<void> {
  const upstream = await startUpstream();
  const rows: Row[] = [];
  try {
    for (const n of counts) {
      const dir = mkdtempSync(path.join(os.tmpdir(), `switchyard-bench-scale-${n}-`));
      chmodSync(dir, 0o755);
      const sy = await startGatewaySwitchyard({
        upstreamPort: upstream.port,
        dir,
        env: { SWITCHYARD_API_PROCESSES: String(n), SWITCHYARD_ROLE: "api" },
        readyMessage: n > 1 ? "Switchyard supervisor ready" : "Switchyard listening",
      });
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
        const pgCpu = () => pgPids.reduce((s, p) => s + cpuSeconds(p), 0);
        const before = cpu();
        const pgBefore = pgCpu();
        const r = await autocannon({ ...target, connections, duration: seconds });
        const used = cpu().map((c, i) => c - before[i]);
        const total = Math.max(1, r.requests.total);
        rows.push({
          processes: n,
          rps: r.requests.total / (r.duration || seconds),
          errors: r.non2xx + r.errors,
          apiCpuMsPerReq: (1000 * used.reduce((a, b) => a + b, 0)) / total,
          perProcessCpuS: used,
          pgCpuMsPerReq: (1000 * (pgCpu() - pgBefore)) / total,
        });
      } finally {
        const exited = new Promise((r) => sy.child.once("exit", r));
        sy.child.kill("SIGTERM");
        await exited;
      }
    }
  } finally {
    closeRequests();
    upstream.child.kill("SIGTERM");
  }
  const one = rows[0];
  const f = (v: number, d = 2) => (Number.isFinite(v) ? v.toFixed(d) : "—");
  console.log(
    `\nGateway path with N API processes (role api, fake upstream, metering on), ${os.cpus().length} cores; ` +
      `closed loop ${connections} connections ${seconds} s\n`,
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
      figure: `gateway CPU ms per request, ${r.processes} API processes ÷ 1`,
      unit: "ms",
      value: r.apiCpuMsPerReq,
      baseline: one.apiCpuMsPerReq,
      ratio: r.apiCpuMsPerReq / one.apiCpuMsPerReq,
      target: "≤ 1.10 × one process",
      met: r.apiCpuMsPerReq <= 1.1 * one.apiCpuMsPerReq,
    },
  ]);
  printJson("gateway-scale", figures);
}
