/**
 * `npm run bench` (issue 12, item 5): runs every bench script (`bench/*.bench.ts`, compiled to
 * `dist-bench/bench/*.bench.js`) one after the other, each in a process of its own, shows its
 * output, collects the `BENCH_JSON {...}` line each prints last (`bench/report.ts`), and prints
 * one summary table: bench, figure, baseline, Switchyard, ratio, target, met. A bench that exits
 * without that line (crashed, or a skip) is one row saying so.
 *
 *   npm run bench                                   # every bench, full size (takes long: run alone)
 *   BENCH_QUICK=1 npm run bench                     # every bench, small sizes (a smoke test)
 *   BENCH_ONLY=chat-completions,db-scale npm run bench
 *
 * BENCH_ONLY: comma-separated bench names (file names without `.bench.ts`). BENCH_QUICK sets the
 * small sizes below for each bench unless the environment already sets them. BENCH_TIMEOUT_S
 * (default 3600) bounds each bench. Exits 1 when a target is missed or a bench failed.
 */
import { spawn } from "node:child_process";
import { readdirSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { type BenchFigure, JSON_PREFIX, printFigures } from "./report.js";

const here = path.dirname(fileURLToPath(import.meta.url));
const TIMEOUT_S = Number(process.env.BENCH_TIMEOUT_S ?? 3600);

/** Small sizes per bench for BENCH_QUICK (each bench reads these variables; see its header). */
const QUICK: Record<string, Record<string, string>> = {
  "chat-completions": { BENCH_SECONDS: "2", BENCH_CONCURRENCY: "1", BENCH_MAX_TOKENS: "16" },
  flush: { BENCH_CALLS: "50" },
  activity: { BENCH_ROWS: "20000", BENCH_CALLS: "5" },
  background: { BENCH_REQUESTS: "40", BENCH_CONCURRENCY: "4" },
  batches: { BENCH_ITEMS: "100", BENCH_RESULT_ITEMS: "1000", BENCH_UPLOAD_ITEMS: "1000" },
  decisions: { BENCH_ROUNDS: "1" },
  structured: { BENCH_SECONDS: "1", BENCH_ROUNDS: "1", BENCH_TTFT_RUNS: "3" },
  "events-feed": { BENCH_COMPLETIONS: "30" },
  gateway: { BENCH_SECONDS: "2", BENCH_RATE: "100" },
  webhooks: { BENCH_REQUESTS: "40" },
  "fuzz-openapi": { BENCH_REQUESTS: "300" },
  scheduling: { BENCH_ITEMS: "300", BENCH_INTERACTIVE: "50" },
  "db-scale": {
    BENCH_ROWS: "100000",
    BENCH_EVENTS: "10000",
    BENCH_RUNS: "5",
    BENCH_RETENTION_BACKLOG: "2000",
    BENCH_DB_DIR: path.join(here, "..", "..", ".data", "bench-db-scale-quick"),
  },
};

interface Outcome {
  bench: string;
  figures: BenchFigure[];
  /** Why there are no figures (skipped, failed). */
  note?: string;
  seconds: number;
}

function runOne(bench: string, file: string): Promise<Outcome> {
  const started = Date.now();
  const env = { ...process.env };
  if (process.env.BENCH_QUICK) for (const [k, v] of Object.entries(QUICK[bench] ?? {})) env[k] ??= v;
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [file], { env, stdio: ["ignore", "pipe", "inherit"] });
    let last: { figures?: BenchFigure[]; skipped?: string } | null = null;
    let buffered = "";
    child.stdout.on("data", (chunk: Buffer) => {
      process.stdout.write(chunk);
      buffered += chunk.toString("utf8");
      const lines = buffered.split("\n");
      buffered = lines.pop() ?? "";
      for (const line of lines) {
        if (line.startsWith(JSON_PREFIX)) last = JSON.parse(line.slice(JSON_PREFIX.length));
      }
    });
    const timer = setTimeout(() => child.kill("SIGTERM"), TIMEOUT_S * 1000);
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      if (buffered.startsWith(JSON_PREFIX)) last = JSON.parse(buffered.slice(JSON_PREFIX.length));
      const seconds = (Date.now() - started) / 1000;
      const got = last as { figures?: BenchFigure[]; skipped?: string } | null;
      if (got?.skipped) resolve({ bench, figures: [], note: `skipped: ${got.skipped}`, seconds });
      else if (got?.figures && code === 0) resolve({ bench, figures: got.figures, seconds });
      else {
        resolve({
          bench,
          figures: got?.figures ?? [],
          note: `failed (exit ${signal ?? code}${got ? "" : ", no figures"})`,
          seconds,
        });
      }
    });
  });
}

const num = (n: number | undefined, unit?: string) =>
  n === undefined || Number.isNaN(n)
    ? "—"
    : `${n >= 100 ? n.toFixed(0) : n.toFixed(n >= 10 ? 1 : 2)}${unit ? ` ${unit}` : ""}`;

async function main(): Promise<void> {
  const only = process.env.BENCH_ONLY?.split(",").map((s) => s.trim());
  // The benches are the sources (`bench/*.bench.ts`), not whatever `dist-bench` holds: a compiled
  // file whose source was deleted stays there (tsc never removes outputs) and must not run.
  const files = readdirSync(path.join(here, "..", "..", "bench"))
    .filter((f) => f.endsWith(".bench.ts"))
    .map((f) => f.slice(0, -".bench.ts".length))
    // The current headline figure first, then alphabetically.
    .sort((a, b) => (a === "chat-completions" ? -1 : b === "chat-completions" ? 1 : a.localeCompare(b)))
    .filter((b) => !only || only.includes(b));
  const outcomes: Outcome[] = [];
  for (const bench of files) {
    console.log(`\n=== ${bench}${process.env.BENCH_QUICK ? " (quick)" : ""} ===`);
    outcomes.push(await runOne(bench, path.join(here, `${bench}.bench.js`)));
  }
  const rows: Array<{ bench: string; f?: BenchFigure; note?: string }> = [];
  for (const o of outcomes) {
    for (const f of o.figures) rows.push({ bench: o.bench, f });
    if (o.note) rows.push({ bench: o.bench, note: `${o.note} after ${o.seconds.toFixed(0)} s` });
  }
  console.log(`\n=== summary${process.env.BENCH_QUICK ? " (quick sizes: not the targets' conditions)" : ""} ===\n`);
  printFigures(rows, ["bench", "figure", "baseline", "Switchyard", "ratio", "target", "met"], (r) => {
    if (!r.f) return [r.bench, r.note ?? "", "", "", "", "", ""];
    const f = r.f;
    const ratio = f.ratio ?? (f.baseline ? f.value / f.baseline : undefined);
    return [
      r.bench,
      f.figure,
      num(f.baseline, f.unit),
      num(f.value, f.unit),
      ratio === undefined ? "—" : ratio.toFixed(2),
      f.target,
      f.met === null ? "—" : f.met ? "yes" : "NO",
    ];
  });
  const missed = rows.some((r) => r.note?.startsWith("failed") || r.f?.met === false);
  process.exitCode = missed ? 1 : 0;
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
