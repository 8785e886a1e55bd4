/**
 * Engine scheduling (issue 12, item 3): the CPU threads per context and the parallel sequences
 * per generation model, chosen from the machine by measurement rather than assumed. When a model
 * file is first loaded with `SWITCHYARD_ENGINE_THREADS` and/or `SWITCHYARD_ENGINE_SEQUENCES` at
 * `auto` (the default), a short probe decodes a few dozen tokens:
 *
 * 1. threads: one sequence, greedy decoding of `PROBE_TOKENS` tokens with 1, 2, … up to the usable
 *    cores (`os.availableParallelism()`); the fastest wins (on a shared 2-vCPU machine one thread
 *    beat two by 17× for tinystories-260k: llama.cpp's threads spin-wait on each other). A count
 *    already 3× slower than the best is cut short.
 * 2. sequences: with those threads, `PROBE_SEQUENCE_STEPS` decode steps of S sequences batched
 *    together for S in 1, 2, 4, 8 (at most the former fixed default: memory is not measured,
 *    and each sequence holds a KV cache of the model's whole context); the smallest S giving ≥ `SEQUENCE_GAIN_FLOOR` of the best
 *    aggregate tokens/s wins (more sequences than that only add memory and per-request latency),
 *    the best of `SEQUENCE_ROUNDS` interleaved rounds per count; never below 2 (the batch runner runs sequences − 1 items, keeping one for interactive
 *    requests: DESIGN §3, issue 7).
 *
 * The result is cached in `<dataDir>/engine-tuning.json` by model file (name, size, mtime) and
 * machine (CPU model, usable cores), so later starts do not measure again. A number in the
 * configuration wins over the measurement (and skips that half of the probe).
 */
import { mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import type { LlamaContext, LlamaModel, Token } from "node-llama-cpp";
import type { Logger } from "pino";
import { DEFAULT_ENGINE_SEQUENCES, type EngineTuning, type TuningSetting } from "../../tuning.js";

/** Tokens each thread count decodes (after `WARMUP_TOKENS`). */
export const PROBE_TOKENS = 32;
const WARMUP_TOKENS = 4;
/** Decode steps per sequence count in the sequences probe. */
export const PROBE_SEQUENCE_STEPS = 16;
/** Sequence counts tried (bounded: each sequence holds a KV cache of the model's whole context). */
export const SEQUENCE_CANDIDATES = [1, 2, 4, 8] as const;
/** Measurements per sequence count (interleaved; the best counts). */
export const SEQUENCE_ROUNDS = 3;
/** The smallest sequence count reaching this share of the best aggregate tokens/s is kept. */
export const SEQUENCE_GAIN_FLOOR = 0.85;
/** Fewest sequences chosen by `auto` (one for interactive requests beside the batch runner's). */
export const MIN_AUTO_SEQUENCES = 2;
/** Longest one measurement may take, ms (a big model on a slow CPU decodes fewer tokens). */
const PROBE_BUDGET_MS = 2_000;
/** Bump when the probe changes, so cached choices of an older probe are measured again. */
const PROBE_VERSION = 1;

export interface TuningOptions {
  threads: TuningSetting;
  sequences: TuningSetting;
  dataDir: string;
  logger: Logger;
  /** Most threads tried; default `os.availableParallelism()`. */
  maxThreads?: number;
}

/** The cache file in the data dir. */
export function tuningCachePath(dataDir: string): string {
  return path.join(dataDir, "engine-tuning.json");
}

/**
 * The threads and sequences for `model` (loaded from `modelPath`): configured numbers as they
 * are, `auto` ones from the cache or measured (see the module header) and cached.
 * @param contextSize the probe contexts' size, tokens (small: the probe decodes few tokens).
 * Never throws for a failed measurement: it logs it and falls back to 1 thread and
 * `DEFAULT_ENGINE_SEQUENCES`.
 */
export async function chooseTuning(model: LlamaModel, modelPath: string, opts: TuningOptions): Promise<EngineTuning> {
  if (opts.threads !== "auto" && opts.sequences !== "auto") {
    return { threads: opts.threads, sequences: opts.sequences, source: "config", probeMs: 0 };
  }
  const maxThreads = Math.max(1, opts.maxThreads ?? os.availableParallelism());
  const key = cacheKey(modelPath, maxThreads);
  const cache = readCache(opts.dataDir);
  const entry: CacheEntry = { ...cache[key] };
  const started = performance.now();
  let measured = false;
  try {
    let threads: number;
    if (opts.threads !== "auto") threads = opts.threads;
    else if (entry.threads !== undefined && entry.threadsTokensPerS) threads = entry.threads;
    else {
      const rates: Record<string, number> = {};
      let best = 0;
      threads = 1;
      for (let t = 1; t <= maxThreads; t++) {
        // A count already 3× slower than the best is cut short (2 threads took ~0.25 s a token here).
        const budget = best > 0 ? (3 * (WARMUP_TOKENS + PROBE_TOKENS) * 1000) / best : PROBE_BUDGET_MS;
        const rate = await decodeRate(model, t, 1, PROBE_TOKENS, Math.min(budget, PROBE_BUDGET_MS));
        rates[t] = round1(rate);
        if (rate > best) {
          best = rate;
          threads = t;
        }
      }
      Object.assign(entry, { threads, threadsTokensPerS: rates });
      measured = true;
    }
    let sequences: number;
    if (opts.sequences !== "auto") sequences = opts.sequences;
    // Sequences measured with other threads than these are measured again.
    else if (entry.sequences !== undefined && entry.sequencesThreads === threads) sequences = entry.sequences;
    else {
      // Rounds interleaved over the candidates, the best of each kept: other load on the machine
      // only ever slows a measurement, so the best is the least disturbed one (one round picked
      // 2, 4 or 8 from run to run here).
      const rates: Record<string, number> = {};
      for (let round = 0; round < SEQUENCE_ROUNDS; round++) {
        for (const s of SEQUENCE_CANDIDATES) {
          const rate = await decodeRate(model, threads, s, PROBE_SEQUENCE_STEPS, PROBE_BUDGET_MS);
          rates[s] = Math.max(rates[s] ?? 0, rate);
        }
      }
      for (const s of SEQUENCE_CANDIDATES) rates[s] = round1(rates[s]);
      const best = Math.max(...Object.values(rates));
      const enough = SEQUENCE_CANDIDATES.find((s) => rates[s] >= SEQUENCE_GAIN_FLOOR * best);
      sequences = Math.max(MIN_AUTO_SEQUENCES, enough ?? MIN_AUTO_SEQUENCES);
      Object.assign(entry, { sequences, sequencesTokensPerS: rates, sequencesThreads: threads });
      measured = true;
    }
    if (measured) {
      cache[key] = { ...entry, at: new Date().toISOString() };
      writeCache(opts.dataDir, cache, opts.logger);
    }
    return {
      threads,
      sequences,
      source: measured ? "measured" : "cached",
      threadsTokensPerS: opts.threads === "auto" ? entry.threadsTokensPerS : undefined,
      sequencesTokensPerS: opts.sequences === "auto" ? entry.sequencesTokensPerS : undefined,
      probeMs: measured ? Math.round(performance.now() - started) : 0,
    };
  } catch (err) {
    opts.logger.warn({ err, modelPath }, "engine tuning probe failed; using 1 thread and the default sequences");
    return {
      threads: opts.threads === "auto" ? 1 : opts.threads,
      sequences: opts.sequences === "auto" ? DEFAULT_ENGINE_SEQUENCES : opts.sequences,
      source: "measured",
      probeMs: Math.round(performance.now() - started),
    };
  }
}

/**
 * Aggregate greedy decode tokens/s of `sequences` sequences decoding together (llama.cpp decodes
 * them in one batch per step) with `threads`: `sequences` × 1000 / the median step time, ms. The
 * median, not the mean: on a shared machine a preempted step would otherwise decide the choice.
 * Stops after `steps` steps (plus `WARMUP_TOKENS`), or once `budgetMs` has passed.
 */
async function decodeRate(
  model: LlamaModel,
  threads: number,
  sequences: number,
  steps: number,
  budgetMs: number,
): Promise<number> {
  const context: LlamaContext = await model.createContext({
    contextSize: probeContextSize(model),
    sequences,
    threads,
  });
  try {
    const seqs = Array.from({ length: sequences }, () => context.getSequence());
    const began = performance.now();
    const stamps: number[] = [];
    await Promise.all(
      seqs.map(async (seq, i) => {
        let count = 0;
        for await (const token of seq.evaluate(seedTokens(model), { temperature: 0 })) {
          void token;
          count++;
          if (i === 0) stamps.push(performance.now());
          if (count >= WARMUP_TOKENS + steps || performance.now() - began > budgetMs) break;
        }
      }),
    );
    const intervals = stamps
      .slice(Math.min(WARMUP_TOKENS, Math.max(0, stamps.length - 2)))
      .map((t, k, a) => (k === 0 ? NaN : t - a[k - 1]))
      .filter((d) => !Number.isNaN(d))
      .sort((a, b) => a - b);
    // One token only (the budget ran out at once): time from the start.
    const step = intervals.length > 0 ? intervals[Math.floor(intervals.length / 2)] : performance.now() - began;
    return (sequences * 1000) / Math.max(0.001, step);
  } finally {
    await context.dispose();
  }
}

/** A small context: the probe decodes a few dozen tokens from a one-token prompt. */
function probeContextSize(model: LlamaModel): number {
  return Math.min(256, model.trainContextSize);
}

/** The probe's prompt: the BOS token when the model has one, else its first text token. */
function seedTokens(model: LlamaModel): Token[] {
  const bos = model.tokens.bos;
  if (bos != null) return [bos];
  const text = model.tokenize("Once upon a time");
  return text.length > 0 ? text : [0 as Token];
}

/** One cached choice: each half as measured (sequences with the threads they were measured at). */
interface CacheEntry {
  threads?: number;
  threadsTokensPerS?: Record<string, number>;
  sequences?: number;
  sequencesTokensPerS?: Record<string, number>;
  sequencesThreads?: number;
  at?: string;
}

type Cache = Record<string, CacheEntry>;

/** Model file (name, size, mtime) + machine (CPU model, usable cores) + probe version. */
function cacheKey(modelPath: string, maxThreads: number): string {
  const st = statSync(modelPath);
  const cpu = os.cpus()[0]?.model?.trim() ?? "unknown";
  return [
    `v${PROBE_VERSION}`,
    path.basename(modelPath),
    st.size,
    Math.round(st.mtimeMs),
    cpu,
    `${maxThreads} cores`,
  ].join("|");
}

function readCache(dataDir: string): Cache {
  try {
    const parsed: unknown = JSON.parse(readFileSync(tuningCachePath(dataDir), "utf8"));
    return parsed && typeof parsed === "object" && !Array.isArray(parsed) ? (parsed as Cache) : {};
  } catch {
    return {};
  }
}

function writeCache(dataDir: string, cache: Cache, logger: Logger): void {
  try {
    mkdirSync(dataDir, { recursive: true });
    const file = tuningCachePath(dataDir);
    const tmp = `${file}.${process.pid}.tmp`;
    writeFileSync(tmp, JSON.stringify(cache, null, 2) + "\n");
    renameSync(tmp, file);
  } catch (err) {
    logger.warn({ err }, "could not write the engine tuning cache");
  }
}

function round1(n: number): number {
  return Math.round(n * 10) / 10;
}
