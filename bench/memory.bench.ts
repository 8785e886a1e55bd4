/**
 * `npm run bench:memory` (issue 31, Checks: "RSS of the whole machine's processes with N = 1, 2, 4
 * API processes and the tiny and a ~100 MB model: models counted once"). Starts Switchyard as
 * `npm start` does (the built `dist/main.js`, its own embedded PostgreSQL, role `all`) with each
 * configuration in turn, for two catalogs: the tiny test model (`stories260K.gguf` from
 * SWITCHYARD_MODELS_DIR) and a ~100 MB llama with random weights that this bench writes to the
 * system's temp folder (`synthetic-gguf.ts`: dim 768, 8 layers, F16; generated once, reused).
 *
 * Configurations (`SWITCHYARD_API_PROCESSES` and `SWITCHYARD_ENGINE_PROCESS`), by their labels:
 * - `1 (one process)`: one process serves everything, the model loaded in it (`npm start`'s default);
 * - `1 + engine`: a supervisor, one API process, the worker and the engine process (`on`);
 * - `N + engine` for N in BENCH_COUNTS above 1 (default 2 and 4): a supervisor, N API processes,
 *   the worker and the engine process (`auto`);
 * - `4, engine off` (the largest count; BENCH_ENGINE_OFF=0 skips it): every API process and the
 *   worker load the model themselves, as before the engine process existed.
 *
 * The model's memory is the 100 MB catalog's minus the tiny one's, over Switchyard's processes
 * (PostgreSQL's left out: its backends come and go with the pools, whatever the model). Counted
 * once, it is the same with 4 API processes as with one (target: under 2 ×, which a second copy
 * would reach); loaded by every process it is several times that (4 API processes and the worker).
 *
 * After warm-up (chat completions on fresh connections, so the supervisor hands them to every API
 * process, each model loaded and its contexts made) and a pause, it reads every process of the
 * tree from /proc, each figure the median of BENCH_SAMPLES readings 1 s apart (default 5): RSS
 * (`VmRSS`, split into anonymous, file-backed and shared memory) and PSS (`smaps_rollup`: each
 * shared page divided among the processes that map it). RSS summed over a tree counts a page
 * shared by k processes k times (PostgreSQL's shared buffers, a model file mapped by several
 * processes, the Node binary); PSS summed is what the tree takes from the machine. It also counts
 * PostgreSQL's backends serving a connection (idle pools, after warm-up). Engine threads 1 and
 * sequences 4 are fixed (`auto` would measure them at each start and size the contexts
 * differently from run to run). Results: bench/NOTES.md, docs/capacity.md.
 *
 *   npm run bench:memory
 *   BENCH_COUNTS=2 BENCH_MODELS=100mb npm run bench:memory
 *
 * Prints a table per run, a summary, and last a `BENCH_JSON` line.
 */
import { type ChildProcess, spawn } from "node:child_process";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { closeRequests, json, request, signup } from "./child-server.js";
import { waitForLine } from "./gateway-processes.js";
import { descendants } from "./proc-stats.js";
import { type BenchFigure, printFigures, printJson } from "./report.js";
import { LLAMA_100MB, writeSyntheticLlama } from "./synthetic-gguf.js";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const MODELS_DIR = process.env.SWITCHYARD_MODELS_DIR ?? path.resolve(root, "../shared/models");
const TINY_FILE = "stories260K.gguf";
const BIG_FILE = "switchyard-bench-llama-100mb.gguf";
const COUNTS = (process.env.BENCH_COUNTS ?? "1,2,4").split(",").map(Number);
const MODELS = (process.env.BENCH_MODELS ?? "tiny,100mb").split(",");
const ENGINE_OFF = process.env.BENCH_ENGINE_OFF !== "0";
const SETTLE_MS = Number(process.env.BENCH_SETTLE_MS ?? 3000);
const SAMPLES = Number(process.env.BENCH_SAMPLES ?? 5);
const MiB = 1024 * 1024;

/** One configuration of one run. */
interface RunConfig {
  label: string;
  apiProcesses: number;
  engineProcess: "auto" | "on" | "off";
}

/** One process's memory, bytes. */
interface ProcMemory {
  role: string;
  pid: number;
  rss: number;
  anon: number;
  file: number;
  shmem: number;
  pss: number;
  /** A PostgreSQL backend serving a client connection (its title names the client's address). */
  connection?: boolean;
}

interface RunResult {
  model: string;
  config: RunConfig;
  procs: ProcMemory[];
}

/** The catalog entry of `id` on `file` (a copy of the tiny model's entry: no chat template, BOS ends a turn). */
function catalogFor(id: string, file: string, sizeBytes: number): unknown {
  return {
    default_model: id,
    models: [
      {
        id,
        display_name: `Memory bench (${file})`,
        provider: "switchyard",
        modality: "text_generation",
        context_tokens: 512,
        pricing: { input_per_million_usd: 0.02, output_per_million_usd: 0.05 },
        engine: {
          type: "llama_cpp",
          file,
          size_bytes: sizeBytes,
          context_size: 512,
          chat_template: "none",
          eog_token_ids: [1],
        },
      },
    ],
  };
}

/** The ~100 MB model in `<tmp>/switchyard-bench-models/`, written when missing. Returns its folder. */
function bigModelDir(): string {
  const dir = path.join(os.tmpdir(), "switchyard-bench-models");
  mkdirSync(dir, { recursive: true });
  chmodSync(dir, 0o755);
  const file = path.join(dir, BIG_FILE);
  if (!existsSync(file)) {
    const started = Date.now();
    const size = writeSyntheticLlama(`${file}.part`, path.join(MODELS_DIR, TINY_FILE), LLAMA_100MB);
    renameSync(`${file}.part`, file); // only once complete: a cut run leaves no short file behind
    console.log(`wrote ${file}: ${(size / MiB).toFixed(1)} MiB in ${Date.now() - started} ms`);
  }
  return dir;
}

/** Reads `pid`'s memory from /proc; undefined when it is gone. */
function readMemory(pid: number, role: string): ProcMemory | undefined {
  try {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    const kb = (text: string, field: string) =>
      Number(new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(text)?.[1] ?? 0) * 1024;
    const rollup = readFileSync(`/proc/${pid}/smaps_rollup`, "utf8");
    return {
      role,
      pid,
      rss: kb(status, "VmRSS"),
      anon: kb(status, "RssAnon"),
      file: kb(status, "RssFile"),
      shmem: kb(status, "RssShmem"),
      pss: kb(rollup, "Pss"),
    };
  } catch {
    return undefined;
  }
}

/** Whether `pid` is a PostgreSQL backend of a client connection: its title is `postgres: user db host(port) state`. */
function isConnection(pid: number): boolean {
  try {
    return /\(\d+\)/.test(readFileSync(`/proc/${pid}/cmdline`, "utf8"));
  } catch {
    return false;
  }
}

function comm(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/comm`, "utf8").trim();
  } catch {
    return "?";
  }
}

/**
 * The memory of `root` and its descendants: SAMPLES readings 1 s apart, each figure the median of
 * its process's readings (a V8 heap that grows and shrinks between collections moves one reading
 * by 10–30 MiB). PostgreSQL's processes are found by name, the others named by `roles`.
 */
async function sampleTree(root: number, roles: Map<number, string>): Promise<ProcMemory[]> {
  const readings = new Map<number, ProcMemory[]>();
  for (let i = 0; i < SAMPLES; i++) {
    if (i > 0) await new Promise((r) => setTimeout(r, 1000));
    for (const pid of [root, ...descendants(root)]) {
      const role = roles.get(pid) ?? (comm(pid) === "postgres" ? "postgres" : `other (${comm(pid)})`);
      const m = readMemory(pid, role);
      if (m)
        readings.set(pid, [
          ...(readings.get(pid) ?? []),
          { ...m, connection: role === "postgres" && isConnection(pid) },
        ]);
    }
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  return [...readings.values()].map((rs) => ({
    ...rs[0],
    rss: median(rs.map(rss)),
    anon: median(rs.map((r) => r.anon)),
    file: median(rs.map((r) => r.file)),
    shmem: median(rs.map((r) => r.shmem)),
    pss: median(rs.map(pss)),
  }));
}

/** Starts `dist/main.js` with `env`; resolves with the child, its URL and the pid → role map. */
async function startSwitchyard(
  dir: string,
  config: RunConfig,
  env: Record<string, string>,
): Promise<{ child: ChildProcess; url: string; roles: Map<number, string> }> {
  const child = spawn(process.execPath, [path.join(root, "dist/main.js")], {
    cwd: dir,
    env: {
      ...process.env,
      PORT: "0",
      HOST: "127.0.0.1",
      LOG_LEVEL: "info",
      SWITCHYARD_DATA_DIR: path.join(dir, "data"),
      SWITCHYARD_ALLOW_MODEL_DOWNLOAD: "false",
      SWITCHYARD_API_PROCESSES: String(config.apiProcesses),
      SWITCHYARD_ENGINE_PROCESS: config.engineProcess,
      SWITCHYARD_ENGINE_THREADS: "1",
      SWITCHYARD_ENGINE_SEQUENCES: "4",
      ...env,
    },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const supervised = config.apiProcesses > 1 || config.engineProcess === "on";
  const ready = await waitForLine(child, (e) =>
    e.msg === (supervised ? "Switchyard supervisor ready" : "Switchyard listening") ? e : undefined,
  );
  child.stdout!.resume();
  const roles = new Map<number, string>([[child.pid!, supervised ? "supervisor" : "switchyard (all)"]]);
  for (const p of (ready.pids as Array<{ role: string; pid: number }> | undefined) ?? []) roles.set(p.pid, p.role);
  return { child, url: ready.url as string, roles };
}

/** One run: start, warm up, measure, stop. */
async function measure(model: string, modelId: string, modelsDir: string, file: string, config: RunConfig) {
  const dir = mkdtempSync(path.join(os.tmpdir(), "switchyard-bench-memory-"));
  chmodSync(dir, 0o755);
  const catalog = path.join(dir, "catalog.json");
  writeFileSync(catalog, JSON.stringify(catalogFor(modelId, file, statSync(path.join(modelsDir, file)).size)));
  const sy = await startSwitchyard(dir, config, { SWITCHYARD_CATALOG: catalog, SWITCHYARD_MODELS_DIR: modelsDir });
  try {
    const key = await signup(sy.url, "bench-memory");
    const body = JSON.stringify({
      model: modelId,
      messages: [{ role: "user", content: "Once upon a time" }],
      max_tokens: 16,
    });
    // Fresh connections: the supervisor hands each to the next API process in turn.
    for (let i = 0; i < 3 * (config.apiProcesses + 1); i++) {
      await json(request(sy.url, "POST", "/v1/chat/completions", { body, key, fresh: true }), 200, "chat completion");
    }
    await new Promise((r) => setTimeout(r, SETTLE_MS));
    const apiCount = [...sy.roles.values()].filter((r) => r === "api").length;
    const procs = await sampleTree(sy.child.pid!, sy.roles);
    if (config.apiProcesses > 1 && apiCount !== config.apiProcesses)
      throw new Error(`${apiCount} API processes started`);
    return { model, config, procs };
  } finally {
    const exited = new Promise((r) => sy.child.once("exit", r));
    sy.child.kill("SIGTERM");
    await exited;
    rmSync(dir, { recursive: true, force: true });
  }
}

const mib = (bytes: number) => (bytes / MiB).toFixed(1);
const sum = (procs: ProcMemory[], f: (p: ProcMemory) => number) => procs.reduce((s, p) => s + f(p), 0);

/** `procs` added up as one row named `what`. */
function aggregate(procs: ProcMemory[], what: string): ProcMemory & { what: string } {
  const add = (f: (p: ProcMemory) => number) => sum(procs, f);
  const memory = { rss: add(rss), anon: add((p) => p.anon), file: add((p) => p.file), shmem: add((p) => p.shmem) };
  return { role: what, pid: 0, what, ...memory, pss: add(pss) };
}

/** The per-process table of one run (PostgreSQL's processes on one line). */
function printRun(r: RunResult): void {
  console.log(`\n### ${r.model}, ${r.config.label}`);
  const pg = r.procs.filter(isPg);
  const rows = ours(r).map((p) => ({ ...p, what: `${p.role} ${p.pid}` }));
  if (pg.length > 0) {
    rows.push(
      aggregate(pg, `PostgreSQL (${pg.length} processes, ${pg.filter((p) => p.connection).length} connections)`),
    );
  }
  rows.push(aggregate(r.procs, "total"));
  printFigures(rows, ["process", "RSS MiB", "anon", "file", "shmem", "PSS MiB"], (p) =>
    [p.rss, p.anon, p.file, p.shmem, p.pss].reduce((cells, v) => [...cells, mib(v)], [p.what]),
  );
}

const isPg = (p: ProcMemory) => p.role === "postgres";
const ours = (r: RunResult) => r.procs.filter((p) => !isPg(p));
const rss = (p: ProcMemory) => p.rss;
const pss = (p: ProcMemory) => p.pss;

async function main(): Promise<void> {
  const configs: RunConfig[] = [];
  for (const n of COUNTS) {
    configs.push({ label: n === 1 ? "1 (one process)" : `${n} + engine`, apiProcesses: n, engineProcess: "auto" });
    if (n === 1) configs.push({ label: "1 + engine", apiProcesses: 1, engineProcess: "on" });
  }
  const maxCount = Math.max(...COUNTS);
  if (ENGINE_OFF && maxCount > 1) {
    configs.push({ label: `${maxCount}, engine off`, apiProcesses: maxCount, engineProcess: "off" });
  }
  const models: Array<{ name: string; id: string; dir: string; file: string }> = [];
  if (MODELS.includes("tiny")) models.push({ name: "tiny", id: "tinystories-260k", dir: MODELS_DIR, file: TINY_FILE });
  if (MODELS.includes("100mb")) {
    models.push({ name: "100mb", id: "bench-llama-100mb", dir: bigModelDir(), file: BIG_FILE });
  }
  const results: RunResult[] = [];
  for (const m of models) {
    for (const config of configs) {
      const r = await measure(m.name, m.id, m.dir, m.file, config);
      printRun(r);
      results.push(r);
    }
  }
  closeRequests();
  summarize(results, models, configs, maxCount);
}

/** The summary table, the derived lines and the BENCH_JSON figures. */
function summarize(
  results: RunResult[],
  models: Array<{ name: string; dir: string }>,
  configs: RunConfig[],
  maxCount: number,
): void {
  console.log("\n### Summary (MiB; Switchyard = every process but PostgreSQL's; API = mean of the API processes)");
  const apiMean = (r: RunResult, f: (p: ProcMemory) => number) => {
    const api = r.procs.filter((p) => p.role === "api" || p.role === "switchyard (all)");
    return sum(api, f) / Math.max(1, api.length);
  };
  const engine = (r: RunResult, f: (p: ProcMemory) => number) =>
    sum(
      r.procs.filter((p) => p.role === "engine"),
      f,
    );
  const pg = (r: RunResult) => r.procs.filter(isPg);
  printFigures(
    results,
    [
      "model",
      "configuration",
      "Switchyard processes",
      "Switchyard RSS",
      "Switchyard PSS",
      "API RSS / PSS",
      "engine RSS / PSS",
      "PostgreSQL processes (connections)",
      "PostgreSQL RSS / PSS",
      "total RSS",
      "total PSS",
    ],
    (r) => [
      r.model,
      r.config.label,
      String(ours(r).length),
      mib(sum(ours(r), rss)),
      mib(sum(ours(r), pss)),
      `${mib(apiMean(r, rss))} / ${mib(apiMean(r, pss))}`,
      `${mib(engine(r, rss))} / ${mib(engine(r, pss))}`,
      `${pg(r).length} (${pg(r).filter((p) => p.connection).length})`,
      `${mib(sum(pg(r), rss))} / ${mib(sum(pg(r), pss))}`,
      mib(sum(r.procs, rss)),
      mib(sum(r.procs, pss)),
    ],
  );

  const figures: BenchFigure[] = [];
  const find = (model: string, label: string) => results.find((r) => r.model === model && r.config.label === label);
  // Per added API process: (PSS at the largest count − at the smallest above 1) / the processes added.
  const low = COUNTS.filter((n) => n > 1).sort((a, b) => a - b)[0];
  if (low !== undefined && low < maxCount) {
    for (const m of models) {
      const a = find(m.name, `${low} + engine`);
      const b = find(m.name, `${maxCount} + engine`);
      if (!a || !b) continue;
      const perTree = (sum(b.procs, pss) - sum(a.procs, pss)) / (maxCount - low) / MiB;
      const perOurs = (sum(ours(b), pss) - sum(ours(a), pss)) / (maxCount - low) / MiB;
      console.log(
        `${m.name}: PSS added per API process (${low}→${maxCount}): ${perOurs.toFixed(1)} MiB in Switchyard's ` +
          `processes, ${perTree.toFixed(1)} MiB with PostgreSQL's (one API process: ${mib(apiMean(b, pss))} MiB PSS, ` +
          `${mib(apiMean(b, rss))} MiB RSS)`,
      );
      figures.push({
        figure: `${m.name} model: PSS added per API process (${low}→${maxCount}), PostgreSQL included`,
        unit: "MiB",
        value: perTree,
        baseline: apiMean(b, pss) / MiB,
        target: "≈ one API process's PSS (the baseline), not + the model",
        met: null,
      });
    }
  }
  if (models.length === 2) {
    // The model's own memory: the 100 MB catalog's Switchyard processes minus the tiny one's
    // (PostgreSQL left out: its backends come and go with the pools, whatever the model).
    const bigSize = statSync(path.join(models[1].dir, BIG_FILE)).size / MiB;
    const modelCost = (label: string, f: (p: ProcMemory) => number) => {
      const big = find("100mb", label);
      const tiny = find("tiny", label);
      return big && tiny ? (sum(ours(big), f) - sum(ours(tiny), f)) / MiB : NaN;
    };
    for (const label of configs.map((c) => c.label)) {
      console.log(
        `100 MB model − tiny model, ${label}: Switchyard RSS +${modelCost(label, rss).toFixed(1)} MiB, ` +
          `PSS +${modelCost(label, pss).toFixed(1)} MiB (file ${bigSize.toFixed(1)} MiB)`,
      );
    }
    const first = configs[0].label;
    const last = `${maxCount} + engine`;
    if (maxCount > 1) {
      const ratio = modelCost(last, pss) / modelCost(first, pss);
      figures.push({
        figure: `model counted once: (100 MB − tiny model) PSS of Switchyard's processes, ${last} vs ${first}`,
        unit: "MiB",
        value: modelCost(last, pss),
        baseline: modelCost(first, pss),
        ratio,
        target: "< 2 × (a second copy would reach it)",
        met: ratio < 2,
      });
      const off = `${maxCount}, engine off`;
      if (find("100mb", off) && find("tiny", off)) {
        figures.push({
          figure: `without the engine process: (100 MB − tiny model) PSS, ${off} vs ${first}`,
          unit: "MiB",
          value: modelCost(off, pss),
          baseline: modelCost(first, pss),
          ratio: modelCost(off, pss) / modelCost(first, pss),
          target: `reported (${maxCount + 1} processes load it)`,
          met: null,
        });
      }
      const big = find("100mb", last);
      const tiny = find("tiny", last);
      if (big && tiny) {
        figures.push({
          figure: `API process PSS with the 100 MB model vs the tiny model, ${last}`,
          unit: "MiB",
          value: apiMean(big, pss) / MiB,
          baseline: apiMean(tiny, pss) / MiB,
          target: "reported (≈ 1: the model is not in the API processes)",
          met: null,
        });
      }
    }
  }
  printJson("memory", figures);
}

await main();
