/**
 * Engine scheduling (issue 12, item 3): with `SWITCHYARD_ENGINE_THREADS` / `_SEQUENCES` at `auto`
 * the embedded engine measures threads and sequences at a model file's first load, logs them (and
 * the start banner shows them), caches them in `<dataDir>/engine-tuning.json` by model file and
 * machine so later starts do not measure again, and a configured number wins. No timings are
 * asserted: only which values were chosen and where they came from.
 */
import { existsSync, mkdtempSync, readFileSync, statSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { SEQUENCE_CANDIDATES, tuningCachePath } from "../src/inference/engines/llama-cpp/engine-tuning.js";
import { captureLogs } from "./support/log-capture.js";
import { startTestServer } from "./support/harness.js";
import { SHARED_GGUF, runtimeSlots } from "./support/models.js";

const MODEL = "tinystories-260k";
const dataDir = mkdtempSync(path.join(os.tmpdir(), "switchyard-tuning-"));
const cores = os.availableParallelism();

/** Starts a server on `dir` with the given settings; returns its tuning log record, banner record and slot count. */
async function startWith(dir: string, engineThreads: number | "auto", engineSequences: number | "auto") {
  const logs = captureLogs("info");
  const server = await startTestServer({ dataDir: dir, engineThreads, engineSequences }, undefined, {
    logger: logs.logger,
  });
  try {
    const records = logs.records();
    const tuning = records.find((r) => String(r.msg).startsWith(`engine tuning for ${SHARED_GGUF}`));
    const banner = records.find((r) => String(r.msg).startsWith("serving "));
    const slots = (await runtimeSlots(server, MODEL))?.size;
    return { tuning, banner, slots };
  } finally {
    await server.close();
  }
}

function readCache(dir: string): Record<string, any> {
  return JSON.parse(readFileSync(tuningCachePath(dir), "utf8"));
}

test("when threads and sequences are auto, then the first start measures them, shows them in the banner and caches them", async () => {
  const { tuning, banner, slots } = await startWith(dataDir, "auto", "auto");
  expect(tuning).toMatchObject({ source: "measured" });
  expect(tuning!.threads).toBeGreaterThanOrEqual(1);
  expect(tuning!.threads).toBeLessThanOrEqual(cores);
  // Every thread count from 1 to the usable cores was tried, and every sequence count.
  expect(Object.keys(tuning!.threadsTokensPerS)).toEqual(Array.from({ length: cores }, (_, i) => String(i + 1)));
  expect(Object.keys(tuning!.sequencesTokensPerS)).toEqual(SEQUENCE_CANDIDATES.map(String));
  expect([2, 4, 8]).toContain(tuning!.sequences);
  expect(slots).toBe(tuning!.sequences);
  expect(banner!.msg).toContain(`${tuning!.threads} thread(s), ${tuning!.sequences} sequences measured`);
  expect(banner!.tuning).toMatchObject({ threads: tuning!.threads, sequences: tuning!.sequences });

  const cache = readCache(dataDir);
  const keys = Object.keys(cache);
  expect(keys).toHaveLength(1);
  expect(keys[0]).toContain(SHARED_GGUF);
  expect(keys[0]).toContain(`${cores} cores`);
  expect(cache[keys[0]]).toMatchObject({ threads: tuning!.threads, sequences: tuning!.sequences });
});

test("when the data dir holds a choice for this model file and machine, then a later start uses it without measuring", async () => {
  // A count the probe never picks (3), so the served slots show the choice came from the cache.
  const cache = readCache(dataDir);
  const key = Object.keys(cache)[0];
  cache[key].sequences = 3;
  writeFileSync(tuningCachePath(dataDir), JSON.stringify(cache));
  const before = statSync(tuningCachePath(dataDir)).mtimeMs;

  const { tuning, banner, slots } = await startWith(dataDir, "auto", "auto");
  expect(tuning).toMatchObject({ source: "cached", sequences: 3, threads: cache[key].threads, probeMs: 0 });
  expect(slots).toBe(3);
  expect(banner!.msg).toContain("3 sequences cached");
  expect(statSync(tuningCachePath(dataDir)).mtimeMs).toBe(before);
});

test("when SWITCHYARD_ENGINE_SEQUENCES is set, then it wins over the cached choice", async () => {
  const { tuning, slots } = await startWith(dataDir, "auto", 5);
  expect(tuning).toMatchObject({ sequences: 5, source: "cached" });
  expect(slots).toBe(5);
});

test("when both are set, then nothing is measured and nothing is cached", async () => {
  const fresh = mkdtempSync(path.join(os.tmpdir(), "switchyard-tuning-"));
  const { tuning, banner, slots } = await startWith(fresh, 1, 3);
  expect(tuning).toMatchObject({ threads: 1, sequences: 3, source: "config", probeMs: 0 });
  expect(tuning!.threadsTokensPerS).toBeUndefined();
  expect(slots).toBe(3);
  expect(banner!.msg).toContain("1 thread(s), 3 sequences config");
  expect(existsSync(tuningCachePath(fresh))).toBe(false);
});

test("when only threads are set, then sequences are measured with those threads and cached apart from a threads choice", async () => {
  const fresh = mkdtempSync(path.join(os.tmpdir(), "switchyard-tuning-"));
  const { tuning, slots } = await startWith(fresh, 1, "auto");
  expect(tuning).toMatchObject({ threads: 1, source: "measured" });
  expect(tuning!.threadsTokensPerS).toBeUndefined();
  expect(Object.keys(tuning!.sequencesTokensPerS)).toEqual(SEQUENCE_CANDIDATES.map(String));
  expect(slots).toBe(tuning!.sequences);
  const entry = Object.values(readCache(fresh))[0];
  expect(entry).toMatchObject({ sequences: tuning!.sequences, sequencesThreads: 1 });
  expect(entry.threadsTokensPerS).toBeUndefined();
});
