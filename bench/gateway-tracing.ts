/**
 * The tracing mode of `bench/gateway.bench.ts` (issue 29, Checks: "bench:gateway with tracing
 * exporting: CPU per request rises ≤ 15 %"): `BENCH_TRACING=1 npm run bench:gateway`.
 *
 * Two Switchyards in front of the same bench upstream (`gateway-upstream.ts`), each on its own
 * embedded PostgreSQL: one with tracing off (no OTLP endpoint), one exporting every span (sampler
 * always on, OTLP/HTTP protobuf, the default protocol) to a loopback OTLP receiver in this
 * process, which reads and answers every export (its CPU is this process's, not Switchyard's).
 * Runs at a fixed rate (autocannon's `overallRate`, `BENCH_TRACING_RATE` req/s, default 300, on
 * `BENCH_CONNECTIONS` connections, `BENCH_SECONDS` each), below what either side can serve, so
 * both do the same work per second: a closed loop would let the slower side flush fewer requests
 * per group commit and count that as tracing's cost too. Each round loads both sides at once
 * (`BENCH_TRACING_ROUNDS` rounds, default 7), so drift on a shared machine falls on both; each
 * run's CPU per request is the Switchyard process's own (utime + stime from /proc) over the
 * requests it answered. Printed: each run, the means, and on/off of the means and per round; the
 * figure is the median round's on/off. With
 * `BENCH_SWITCHYARD_NODE_ARGS` (`{side}` is replaced by off/on, e.g.
 * `--cpu-prof --cpu-prof-dir=/tmp/prof-{side}`) both Switchyards get those node options.
 */
import type { ChildProcess } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import os from "node:os";
import path from "node:path";
import autocannon from "autocannon";
import { closeRequests, signup } from "./child-server.js";
import { CHAT_BODY, startGatewaySwitchyard, startUpstream } from "./gateway-processes.js";
import { cpuSeconds } from "./proc-stats.js";
import { type BenchFigure, printFigures, printJson } from "./report.js";

const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 50);
const ROUNDS = Number(process.env.BENCH_TRACING_ROUNDS ?? 7);
const RATE = Number(process.env.BENCH_TRACING_RATE ?? 300);
/** Seconds each side is loaded at `RATE` before the measured rounds. */
const WARMUP_S = Number(process.env.BENCH_TRACING_WARMUP_S ?? 20);
/**
 * Each round loads both sides at the same time (each at `RATE`), so a burst of other work on a
 * shared machine falls on both sides' figures of that round alike; `BENCH_TRACING_TOGETHER=0`
 * loads them one after the other. The default since session 15: one after the other, tracing
 * off alone varied 0.60–1.00 ms per request between rounds of one run on this 2-core machine
 * (bench/NOTES.md, "Session 15").
 */
const TOGETHER = process.env.BENCH_TRACING_TOGETHER !== "0";
/**
 * `BENCH_TRACING_CONTROL=1`: an A/A control, the "on" side started with tracing off too, so the
 * figure shows what the method itself reads between two identical sides (ideally 1.00).
 */
const CONTROL = process.env.BENCH_TRACING_CONTROL === "1";
/** The target: CPU per request with spans exported at most this much above tracing off. */
const MAX_RISE = 0.15;

/** A loopback OTLP/HTTP receiver: reads every export and answers 200; counts exports and bytes. */
async function startReceiver(): Promise<{
  url: string;
  exports: () => number;
  bytes: () => number;
  close: () => Promise<void>;
}> {
  let exports = 0;
  let bytes = 0;
  const server = http.createServer((req, res) => {
    req.on("data", (c: Buffer) => (bytes += c.length));
    req.on("end", () => {
      if (req.method === "POST" && req.url === "/v1/traces") exports++;
      res.writeHead(200, { "content-type": "application/x-protobuf" }).end();
    });
  });
  server.keepAliveTimeout = 120_000;
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    exports: () => exports,
    bytes: () => bytes,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

interface Side {
  name: "off" | "on";
  child: ChildProcess;
  url: string;
  key: string;
  cpuMsPerReq: number[];
  rps: number[];
}

/** `seconds` of requests to `side`, at `rate` req/s in all (undefined: as fast as answered). */
async function load(side: Side, seconds: number, connections: number, rate?: number) {
  const result = await autocannon({
    url: `${side.url}/v1/chat/completions`,
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${side.key}` },
    body: CHAT_BODY,
    connections,
    duration: seconds,
    ...(rate ? { overallRate: rate } : {}),
  });
  const errors = result.non2xx + result.errors;
  if (errors > 0) throw new Error(`tracing ${side.name}: ${errors} of ${result.requests.total} requests failed`);
  return { total: result.requests.total, rps: result.requests.total / (result.duration || seconds) };
}

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

/** Runs the tracing mode (see the module header) and prints its figures. */
export async function runTracingBench(): Promise<void> {
  const dir = mkdtempSync(path.join(os.tmpdir(), "switchyard-bench-tracing-"));
  chmodSync(dir, 0o755);
  const children: ChildProcess[] = [];
  const receiver = await startReceiver();
  try {
    const upstream = await startUpstream();
    children.push(upstream.child);
    const sides: Side[] = [];
    for (const name of ["off", "on"] as const) {
      const own = path.join(dir, name);
      mkdirSync(own);
      chmodSync(own, 0o755);
      const env: Record<string, string> =
        name === "on" && !CONTROL
          ? {
              OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
              OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "",
              OTEL_EXPORTER_OTLP_PROTOCOL: "http/protobuf",
              OTEL_TRACES_SAMPLER: "always_on",
              OTEL_SDK_DISABLED: "",
              OTEL_TRACES_EXPORTER: "",
            }
          : { OTEL_EXPORTER_OTLP_ENDPOINT: "", OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "" };
      const nodeArgs = (process.env.BENCH_SWITCHYARD_NODE_ARGS ?? "")
        .replaceAll("{side}", name)
        .split(" ")
        .filter(Boolean);
      const sy = await startGatewaySwitchyard({ upstreamPort: upstream.port, dir: own, env, nodeArgs });
      children.push(sy.child);
      sides.push({
        name,
        child: sy.child,
        url: sy.url,
        key: await signup(sy.url, `tracing-${name}`),
        cpuMsPerReq: [],
        rps: [],
      });
    }
    // Warm-up at the measured rate: the traced side's span and export code must be compiled too
    // (the JIT's threads count in a process's CPU: short warm-ups showed up as tracing's cost).
    if (TOGETHER) await Promise.all(sides.map((side) => load(side, WARMUP_S, CONNECTIONS, RATE)));
    else for (const side of sides) await load(side, WARMUP_S, CONNECTIONS, RATE);
    const exportsBefore = receiver.exports();
    const measure = async (side: Side, round: number) => {
      const pid = side.child.pid!;
      const cpu = cpuSeconds(pid);
      const run = await load(side, SECONDS, CONNECTIONS, RATE);
      const cpuMs = (1000 * (cpuSeconds(pid) - cpu)) / Math.max(1, run.total);
      side.cpuMsPerReq.push(cpuMs);
      side.rps.push(run.rps);
      console.error(
        `tracing ${side.name}, round ${round + 1}: ${run.rps.toFixed(0)} req/s, CPU ${cpuMs.toFixed(3)} ms/req`,
      );
    };
    for (let round = 0; round < ROUNDS; round++) {
      if (TOGETHER) await Promise.all(sides.map((side) => measure(side, round)));
      else for (const side of sides) await measure(side, round);
    }
    const exports = receiver.exports() - exportsBefore;
    const [off, on] = sides;
    const cpuRatio = mean(on.cpuMsPerReq) / mean(off.cpuMsPerReq);
    // Each round's on/off, and their median: a burst of other work on the machine spoils one round, not the figure.
    const perRound = on.cpuMsPerReq.map((v, i) => v / off.cpuMsPerReq[i]);
    const medianRatio = [...perRound].sort((a, b) => a - b)[Math.floor((perRound.length - 1) / 2)];
    const rpsRatio = mean(on.rps) / mean(off.rps);
    console.log(
      `\nSwitchyard with tracing off and with every span exported (OTLP/HTTP protobuf to a loopback receiver), ` +
        `${os.cpus().length} cores; ${RATE} req/s on ${CONNECTIONS} connections ${SECONDS} s, ${ROUNDS} rounds ` +
        `${TOGETHER ? "with both sides loaded at once" : "off → on"}\n`,
    );
    printFigures(sides, ["tracing", "CPU ms/req per run", "mean CPU ms/req", "req/s per run", "mean req/s"], (s) => [
      s.name,
      s.cpuMsPerReq.map((v) => v.toFixed(3)).join(", "),
      mean(s.cpuMsPerReq).toFixed(3),
      s.rps.map((v) => v.toFixed(0)).join(", "),
      mean(s.rps).toFixed(0),
    ]);
    console.log(
      `\nCPU per request on/off: ${cpuRatio.toFixed(3)} of the means (${((cpuRatio - 1) * 100).toFixed(1)} %; target ≤ +${MAX_RISE * 100} %); ` +
        `per round ${perRound.map((r) => r.toFixed(3)).join(", ")}, median ${medianRatio.toFixed(3)}; ` +
        `req/s on/off: ${rpsRatio.toFixed(3)}; the receiver took ${exports} exports ` +
        `(${(receiver.bytes() / 1024 / 1024).toFixed(1)} MiB in all)`,
    );
    if (exports === 0) throw new Error("the traced Switchyard exported nothing: tracing was not on");
    const figures: BenchFigure[] = [
      {
        figure: `gateway CPU per request, spans exported vs tracing off (${RATE} req/s)`,
        unit: "ms",
        baseline: mean(off.cpuMsPerReq),
        value: mean(on.cpuMsPerReq),
        ratio: medianRatio,
        target: `≤ ${1 + MAX_RISE} × tracing off (ratio column: median of the rounds' on/off)`,
        met: medianRatio <= 1 + MAX_RISE,
      },
    ];
    printJson("gateway-tracing", figures);
  } finally {
    closeRequests();
    for (const child of children) if (child.exitCode === null) child.kill("SIGTERM");
    await Promise.all(
      children.map((c) => (c.exitCode === null ? new Promise((resolve) => c.once("exit", resolve)) : undefined)),
    );
    await receiver.close();
  }
}
