/**
 * In-process CPU of tracing one chat request (`BENCH_TRACING=spans npm run bench:gateway`): the
 * part of `bench:gateway`'s tracing figure that is ours and the SDK's, without HTTP, PostgreSQL
 * or an upstream around it, so a change to the tracing code shows in µs rather than in the few
 * per cent a loaded 2-core machine lets the gateway bench resolve (bench/NOTES.md, Session 14).
 *
 * Each request goes through the app's own code: the HTTP middleware (`traceRequests`, on a
 * stand-in request and answer), the route's scope (`inRequestScope`), `traceTeam`, the traced
 * engine (`tracedEngine`, around a stand-in engine that writes its upstream headers with
 * `withTraceHeaders` and waits one event-loop turn), the metering link (`currentSpan`) and a
 * group-commit span every 16 requests linked to them; 16 requests run at once. Three modes, each
 * run in a child process of its own (fresh heap and JIT), alternating over `BENCH_TRACING_ROUNDS`
 * rounds; a run is `BENCH_SPANS_REQUESTS` requests measured after as many of warm-up:
 * - `off`: `Tracing.off`, as a process without an OTLP endpoint;
 * - `made`: spans made and ended by the SDK, then dropped (a processor that keeps nothing);
 * - `exported`: `createTracing` as the app runs it (batch processor, OTLP/HTTP protobuf) to a
 *   loopback receiver in this process (its CPU is not the child's).
 * Printed: each mode's CPU µs per request (user + system, all threads of the child) per round
 * and the medians, and what `made` and `exported` add to `off`.
 */
import { fork } from "node:child_process";
import { EventEmitter } from "node:events";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { fileURLToPath } from "node:url";
import pino from "pino";
import type { SpanContext } from "../src/shared/tracing.js";
import { printFigures, printJson } from "./report.js";

const ROUNDS = Number(process.env.BENCH_TRACING_ROUNDS ?? 5);
const REQUESTS = Number(process.env.BENCH_SPANS_REQUESTS ?? 20_000);
const CONCURRENCY = 16;
const FLUSH_EVERY = 16;
const MODES = ["off", "made", "exported"] as const;
type Mode = (typeof MODES)[number];

/** One child: runs `REQUESTS` requests after as many of warm-up in `mode`, prints µs per request. */
async function child(mode: Mode, receiverUrl: string): Promise<void> {
  const { loadConfig } = await import("../src/config/config.js");
  const { createTracing } = await import("../src/app/tracing.js");
  const tracingModule = await import("../src/shared/tracing.js");
  const { Tracing, currentSpan, traceTeam, withTraceHeaders } = tracingModule;
  const { traceRequests, inRequestScope } = await import("../src/rest/http-tracing.js");
  const { tracedEngine } = await import("../src/inference/traced-engine.js");
  type Tracer = ConstructorParameters<typeof Tracing>[0];
  let tracing = Tracing.off;
  if (mode === "exported") {
    const config = loadConfig(
      { OTEL_EXPORTER_OTLP_ENDPOINT: receiverUrl, OTEL_EXPORTER_OTLP_PROTOCOL: "http/protobuf" },
      { jwtSecret: "x".repeat(32), dataDir: "/tmp" },
    );
    tracing = await createTracing(config, pino({ level: "silent" }), () => Promise.resolve(false));
  } else if (mode === "made") {
    const { BasicTracerProvider } = await import("@opentelemetry/sdk-trace-base");
    const { W3CTraceContextPropagator } = await import("@opentelemetry/core");
    const keepNothing = {
      onStart: () => {},
      onEnd: () => {},
      forceFlush: () => Promise.resolve(),
      shutdown: () => Promise.resolve(),
    };
    const provider = new BasicTracerProvider({ spanProcessors: [keepNothing] });
    tracing = new Tracing(provider.getTracer("bench") as Tracer, {
      propagator: new W3CTraceContextPropagator(),
      content: false,
    });
  }
  const middleware = traceRequests(tracing);
  const result = {
    text: "Hello",
    finishReason: "stop" as const,
    stopSequence: null,
    usage: { promptTokens: 8, completionTokens: 16, cachedPromptTokens: 0 },
    engineMs: 1,
    queueMs: 0,
  };
  const engine = tracedEngine(
    {
      generate: async () => {
        withTraceHeaders({ "content-type": "application/json", authorization: "Bearer bench" });
        await new Promise((resolve) => setImmediate(resolve));
        return result;
      },
    } as unknown as Parameters<typeof tracedEngine>[0],
    tracing,
  );
  const model = { id: "bench-model", engine: { type: "openai_compatible" } };
  let links: SpanContext[] = [];

  async function request(): Promise<void> {
    const req = {
      method: "POST",
      originalUrl: "/v1/chat/completions",
      headers: { host: "127.0.0.1", "content-type": "application/json", authorization: "Bearer bench" },
      route: { path: "/v1/chat/completions" },
    };
    const res = Object.assign(new EventEmitter(), {
      locals: { requestId: "req_0123456789abcdef01234567" } as Record<string, unknown>,
      statusCode: 200,
      writableFinished: true,
      setHeader: () => {},
    });
    await new Promise<void>((resolve, reject) => {
      const next = () =>
        inRequestScope(res as never, async () => {
          traceTeam("4b6f7a52-1c6e-4d0f-9a43-0c1b5bd3a001");
          await engine.generate({ model, messages: [], maxTokens: 16, maxQueueWaitMs: 1000 } as never);
          const link = currentSpan()?.spanContext();
          if (link) links.push(link);
        }).then(resolve, reject);
      middleware(req as never, res as never, next);
    });
    res.emit("finish");
    res.emit("close");
    if (links.length >= FLUSH_EVERY) {
      const batch = links;
      links = [];
      await tracing.inSpan(
        "metering flush",
        {
          parent: "root",
          links: batch,
          attributes: { "db.system.name": "postgresql", "switchyard.flush.rows": FLUSH_EVERY },
        },
        () => Promise.resolve(),
      );
    }
  }
  async function run(n: number): Promise<void> {
    let started = 0;
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (started++ < n) await request();
      }),
    );
  }
  await run(REQUESTS);
  const before = process.cpuUsage();
  await run(REQUESTS);
  const used = process.cpuUsage(before);
  await tracing.close();
  process.send!({ usPerRequest: (used.user + used.system) / REQUESTS });
}

/** A loopback OTLP/HTTP receiver: reads every export and answers 200. */
async function startReceiver(): Promise<{ url: string; close: () => Promise<void> }> {
  const server = http.createServer((req, res) => {
    req.resume();
    req.on("end", () => res.writeHead(200, { "content-type": "application/x-protobuf" }).end());
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/** Runs one child in `mode` and resolves with its µs per request. */
function runChild(mode: Mode, receiverUrl: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const proc = fork(fileURLToPath(import.meta.url), ["--child", mode, receiverUrl], { stdio: "inherit" });
    let got: number | undefined;
    proc.on("message", (m: { usPerRequest: number }) => (got = m.usPerRequest));
    proc.on("exit", (code) =>
      got === undefined ? reject(new Error(`${mode} child exited with ${code}`)) : resolve(got),
    );
  });
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)];

/** The parent: alternates the modes over `ROUNDS` rounds and prints the figures. */
export async function runSpansBench(): Promise<void> {
  const receiver = await startReceiver();
  const results: Record<Mode, number[]> = { off: [], made: [], exported: [] };
  try {
    for (let round = 0; round < ROUNDS; round++) {
      for (const mode of MODES) {
        results[mode].push(await runChild(mode, receiver.url));
        console.error(`spans ${mode}, round ${round + 1}: ${results[mode].at(-1)!.toFixed(1)} µs/request`);
      }
    }
  } finally {
    await receiver.close();
  }
  const off = median(results.off);
  console.log(
    `\nTracing one chat request in-process (the app's middleware, traced engine, metering link and flush span), ` +
      `${REQUESTS} requests per run, ${CONCURRENCY} at once, ${ROUNDS} rounds\n`,
  );
  printFigures([...MODES], ["mode", "CPU µs/request per round", "median", "added to off"], (mode) => [
    mode,
    results[mode].map((v) => v.toFixed(1)).join(", "),
    median(results[mode]).toFixed(1),
    mode === "off" ? "—" : (median(results[mode]) - off).toFixed(1),
  ]);
  printJson("tracing-spans", [
    {
      figure: "in-process CPU of one traced chat request, spans exported vs tracing off",
      unit: "µs",
      baseline: off,
      value: median(results.exported),
      target: "none (diagnostic: what bench:gateway's tracing figure is made of)",
      met: null,
    },
  ]);
}

if (process.argv[2] === "--child") {
  child(process.argv[3] as Mode, process.argv[4]).catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}
