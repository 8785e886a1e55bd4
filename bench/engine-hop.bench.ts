/**
 * Benchmark (issue 31, item 2): what the loopback hop to an engine process costs. The same model
 * file, decoded greedily from the same prompt, through:
 *
 * - **in-process**: `LlamaCppEngine.generate` in this process, text streamed to `onText`;
 * - **hop**: `RemoteEngine.generate` against an engine server (`engine-server.ts`) in a child
 *   process (`SWITCHYARD_ROLE=engine` does the same), each token an NDJSON event over loopback.
 *
 * Decode tokens/s = completion tokens / wall time, for one stream and for `BENCH_STREAMS`
 * concurrent ones, over back-to-back requests; rounds alternate the two sides (`BENCH_ROUNDS`,
 * `BENCH_SECONDS` each) and the median of each is reported, with hop ÷ in-process and the time
 * the hop adds per token. The tiny test model decodes thousands of tokens/s, so this is the
 * worst case: the per-token cost is fixed, and a real model's tokens take far longer.
 *
 *   npm run bench:engine-hop
 *   BENCH_DECODE_TOKENS=128 BENCH_ROUNDS=5 npm run bench:engine-hop
 *
 * Model files from SWITCHYARD_MODELS_DIR (default ../shared/models). Prints last a `BENCH_JSON` line.
 */
import { fork } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import pino from "pino";
import { loadCatalog } from "../src/config/catalog.js";
import { packageRoot } from "../src/config/config.js";
import type { GenerateRequest, InferenceEngine } from "../src/inference/engine.js";
import { LlamaCppEngine } from "../src/inference/engines/llama-cpp/llama-cpp.engine.js";
import { startEngineServer } from "../src/inference/engines/remote/engine-server.js";
import { RemoteEngine } from "../src/inference/engines/remote/remote.engine.js";
import { BENCH_MODELS_DIR } from "./in-process.js";
import { type BenchFigure, printFigures, printJson } from "./report.js";

const QUICK = process.env.BENCH_QUICK === "1";
const SECONDS = Number(process.env.BENCH_SECONDS ?? (QUICK ? 1 : 3));
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? (QUICK ? 1 : 3));
const DECODE_TOKENS = Number(process.env.BENCH_DECODE_TOKENS ?? 256);
const STREAMS = Number(process.env.BENCH_STREAMS ?? 4);
const TOKEN = "engine-hop-bench-token-engine-hop-bench-token";
const MODEL_ID = "tinystories-260k";

const catalog = loadCatalog(path.join(packageRoot, "src/config/catalog.json"));
const model = catalog.models.find((m) => m.id === MODEL_ID)!;

/** The same engine settings on both sides: one thread per context, `STREAMS` sequences. */
function engine(dataDir: string): LlamaCppEngine {
  return new LlamaCppEngine({
    threads: 1,
    sequences: Math.max(STREAMS, 1),
    embeddingContexts: 1,
    modelsDir: BENCH_MODELS_DIR,
    dataDir,
    gpu: "off",
    logger: pino({ level: "warn" }),
  });
}

/** The child: an engine server on a free loopback port; its URL goes to the parent. */
async function serveChild(): Promise<void> {
  const local = engine(process.env.BENCH_DATA_DIR!);
  await local.load(model);
  const server = await startEngineServer({ engine: local, token: TOKEN, logger: pino({ level: "warn" }) });
  process.send!({ url: server.url });
  process.on("disconnect", () => void server.close(0).then(() => local.close().then(() => process.exit(0))));
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

/** Completion tokens/s of `streams` back-to-back generation loops on `target` for `seconds`. */
async function decodeRate(target: InferenceEngine, streams: number, seconds: number): Promise<number> {
  const req: GenerateRequest = {
    model,
    messages: [{ role: "user", content: "Once upon a time" }],
    maxTokens: DECODE_TOKENS,
    temperature: 0,
    maxQueueWaitMs: 60_000,
    onText: () => {},
  };
  const deadline = performance.now() + seconds * 1000;
  const started = performance.now();
  let tokens = 0;
  await Promise.all(
    Array.from({ length: streams }, async () => {
      while (performance.now() < deadline) tokens += (await target.generate(req)).usage.completionTokens;
    }),
  );
  return tokens / ((performance.now() - started) / 1000);
}

async function main(): Promise<void> {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "switchyard-bench-hop-"));
  const child = fork(fileURLToPath(import.meta.url), [], {
    env: { ...process.env, BENCH_HOP_CHILD: "1", BENCH_DATA_DIR: dataDir },
  });
  const local = engine(dataDir);
  try {
    const url = await new Promise<string>((resolve, reject) => {
      child.once("message", (m: { url: string }) => resolve(m.url));
      child.once("exit", (code) => reject(new Error(`the engine child exited (${code})`)));
    });
    const remote = new RemoteEngine({ url, token: TOKEN });
    await local.load(model);
    // Warm-up: each side's first requests (grammar-free, but contexts and caches settle).
    await decodeRate(local, 1, 0.3);
    await decodeRate(remote, 1, 0.3);
    const rows: Array<{ label: string; streams: number; local: number; hop: number }> = [];
    for (const streams of [1, STREAMS]) {
      const here: number[] = [];
      const there: number[] = [];
      for (let round = 0; round < ROUNDS; round++) {
        here.push(await decodeRate(local, streams, SECONDS));
        there.push(await decodeRate(remote, streams, SECONDS));
      }
      rows.push({ label: `${streams} stream(s)`, streams, local: median(here), hop: median(there) });
    }
    await remote.close();
    printFigures(rows, ["decode", "in-process tok/s", "hop tok/s", "hop ÷ in-process", "added per token"], (r) => [
      r.label,
      r.local.toFixed(0),
      r.hop.toFixed(0),
      (r.hop / r.local).toFixed(3),
      `${((r.streams / r.hop - r.streams / r.local) * 1e6).toFixed(0)} µs`,
    ]);
    const figures: BenchFigure[] = rows.map((r) => ({
      figure: `decode through the engine hop, ${r.label} (${MODEL_ID})`,
      unit: "tok/s",
      value: Math.round(r.hop),
      baseline: Math.round(r.local),
      ratio: Number((r.hop / r.local).toFixed(3)),
      target: "≥ 0.9 × in-process",
      met: r.hop / r.local >= 0.9,
    }));
    printJson("engine-hop", figures);
  } finally {
    child.disconnect();
    await local.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

if (process.env.BENCH_HOP_CHILD === "1") {
  await serveChild();
} else {
  await main();
}
