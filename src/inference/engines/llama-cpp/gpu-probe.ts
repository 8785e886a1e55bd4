/**
 * Which backend the embedded engine starts llama.cpp on (`SWITCHYARD_GPU`), and the GPU probe
 * that keeps a GPU build which crashes its process from taking the server down (faults survived,
 * safe defaults: on an NVIDIA H200 with a CUDA 13.0 driver, node-llama-cpp 3.22.1's CUDA build
 * loaded the model and then aborted the whole process on the first decode).
 *
 * - `off`: the CPU. `cuda`, `vulkan`, `metal`: that build, no probe (it is what the operator chose).
 * - `auto` (the default): when node-llama-cpp finds no usable GPU here (`getLlamaGpuTypes`, a
 *   look at the installed drivers and libraries that loads nothing), the CPU, with no child
 *   process. Otherwise, before llama.cpp starts in this process, a child process
 *   (`gpu-probe-child.ts`) starts it with `gpu: "auto"`, loads the model about to be served and
 *   decodes a few tokens. If the child ends well, this process uses the backend it reported; if it
 *   is killed by a signal, exits non-zero or runs past its time limit, this process uses the CPU
 *   and logs (at error) what failed: the backend, the exit, the likely cause and the end of
 *   the child's output.
 *
 * The verdict is cached in `<dataDir>/gpu-probe.json` by what decides it: node-llama-cpp's
 * version, the platform, the GPU types found, the NVIDIA driver version and GPU models
 * (`/proc/driver/nvidia`), the display devices' PCI ids (`/sys/class/drm`), the CPU, the kernel,
 * `CUDA_VISIBLE_DEVICES` and `LD_LIBRARY_PATH` (a CUDA forward-compatibility library changes the
 * outcome without changing the driver), and the model file (name, size, modification time) with
 * how it is served. So the probe costs once per machine configuration; a cached failure is logged
 * at warn at each start, naming the file to delete to probe again.
 */
import { mkdirSync, readFileSync, readdirSync, renameSync, statSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import type { LlamaGpuType } from "node-llama-cpp";
import type * as NodeLlamaCpp from "node-llama-cpp";
import type { Logger } from "pino";
import { type ProbeCommand, type ProbeInput, defaultProbeCommand } from "./gpu-probe-child.js";
import { type ProbeOutcome, runGpuProbe } from "./gpu-probe-run.js";

/** `SWITCHYARD_GPU`: which backend llama.cpp runs on (see the module header). */
export type GpuSetting = "auto" | "off" | "cuda" | "vulkan" | "metal";

/** Bump when the probe changes, so verdicts of an older probe are probed again. */
const PROBE_VERSION = 1;
/** Default time limit of one probe, ms (`SWITCHYARD_GPU_PROBE_TIMEOUT_S`): a first load may JIT-compile GPU code. */
export const DEFAULT_GPU_PROBE_TIMEOUT_MS = 300_000;

export interface GpuProbeSettings {
  /** `SWITCHYARD_GPU`. */
  setting: GpuSetting;
  dataDir: string;
  logger: Logger;
  /** Time limit of the probe child, ms; default `DEFAULT_GPU_PROBE_TIMEOUT_MS`. */
  timeoutMs?: number;
  /** The probe child; default this Node running `GPU_PROBE_SCRIPT` (`defaultProbeCommand`). */
  command?: ProbeCommand;
  /** CPU threads of the probe's context (a configured `SWITCHYARD_ENGINE_THREADS`); default node-llama-cpp's. */
  threads?: number;
  /** The GPU types usable here; default node-llama-cpp's `getLlamaGpuTypes("supported")`. */
  detect?: () => Promise<LlamaGpuType[]>;
}

/** The model the probe decodes with: the first one this process loads. */
export interface ProbeModel {
  path: string;
  kind: ProbeInput["kind"];
}

/** The backend chosen, and why. */
export interface GpuChoice {
  /** What `getLlama` is given. */
  gpu: LlamaGpuType;
  /** Why the CPU is used although a GPU was found (the start banner adds it); undefined otherwise. */
  note?: string;
  /** `setting`: SWITCHYARD_GPU named it; `no gpu`: none found; `probed`; `cached`: an earlier probe's verdict. */
  source: "setting" | "no gpu" | "probed" | "cached";
}

/** The verdict cache file in the data dir. */
export function gpuProbeCachePath(dataDir: string): string {
  return path.join(dataDir, "gpu-probe.json");
}

/**
 * The backend for `s.setting` (see the module header), probing with `model` (none: llama.cpp is
 * only started, nothing decoded) when `auto` finds a GPU. Never throws: a probe that cannot run
 * counts as a failed one (the CPU).
 */
export async function chooseGpu(
  lib: typeof NodeLlamaCpp,
  model: ProbeModel | undefined,
  s: GpuProbeSettings,
): Promise<GpuChoice> {
  if (s.setting === "off") return { gpu: false, source: "setting" };
  if (s.setting !== "auto") return { gpu: s.setting, source: "setting" };
  try {
    return await probeOrCached(lib, model, s);
  } catch (err) {
    s.logger.error({ err }, "could not decide whether the GPU is usable; serving on the CPU");
    return { gpu: false, source: "probed", note: "GPU probe failed: see the log" };
  }
}

/** `chooseGpu` for `auto`. */
async function probeOrCached(
  lib: typeof NodeLlamaCpp,
  model: ProbeModel | undefined,
  s: GpuProbeSettings,
): Promise<GpuChoice> {
  const found = (await (s.detect ?? (() => lib.getLlamaGpuTypes("supported")))()).filter((t) => t !== false);
  if (found.length === 0) return { gpu: false, source: "no gpu" };

  const cacheFile = gpuProbeCachePath(s.dataDir);
  const key = await verdictKey(lib, found, model);
  const cache = readCache(cacheFile);
  const cached = cache[key];
  if (cached) {
    if (cached.ok) {
      s.logger.info(
        { gpu: cached.gpu, devices: cached.devices, at: cached.at },
        `GPU probe verdict cached: ${describe(cached)}`,
      );
      return { gpu: cached.gpu, source: "cached", note: noGpuNote(cached.gpu, found) };
    }
    s.logger.warn(
      { gpu: cached.gpu, failure: cached.failure, cause: cached.cause, at: cached.at, cacheFile },
      `GPU probe failed on ${cached.at} (${cached.gpu}: ${cached.failure})${cached.cause ? `: ${cached.cause}` : ""}; ` +
        `serving on the CPU. Delete ${cacheFile} to probe again, or set SWITCHYARD_GPU=${cached.gpu} to use it anyway`,
    );
    return { gpu: false, source: "cached", note: `GPU probe failed: ${cached.gpu}, ${cached.failure}, cached` };
  }

  const timeoutMs = s.timeoutMs ?? DEFAULT_GPU_PROBE_TIMEOUT_MS;
  s.logger.info(
    { found, model: model?.path, timeoutMs },
    `probing the GPU build (${found.join(", ")}) in a child process before serving on it`,
  );
  const input: ProbeInput = {
    gpu: "auto",
    modelPath: model?.path,
    kind: model?.kind ?? "generation",
    threads: s.threads,
  };
  const outcome = await runGpuProbe(s.command ?? defaultProbeCommand(), input, timeoutMs);
  const at = new Date().toISOString();
  // A child whose llama.cpp started on the CPU (no GPU build loads here) tested no GPU: whatever
  // else failed in it fails the same way in this process, which handles it (a model not usable).
  if (outcome.ok || outcome.gpu === false) {
    const verdict: Verdict = { ok: true, gpu: outcome.gpu ?? false, devices: outcome.devices, ms: outcome.ms, at };
    s.logger.info(
      { gpu: verdict.gpu, devices: verdict.devices, ms: outcome.ms },
      `GPU probe passed: ${describe(verdict)}`,
    );
    writeCache(cacheFile, { ...cache, [key]: verdict }, s.logger);
    return { gpu: verdict.gpu, source: "probed", note: noGpuNote(verdict.gpu, found) };
  }
  const gpu = outcome.gpu ?? found[0];
  const failure = `${outcome.failure}${stageNote(outcome)}`;
  const verdict: Verdict = { ok: false, gpu, failure, cause: outcome.cause, at };
  s.logger.error(
    {
      gpu,
      devices: outcome.devices,
      code: outcome.code,
      signal: outcome.signal,
      timedOut: outcome.timedOut,
      stage: outcome.stage,
      cause: outcome.cause,
      outputTail: outcome.outputTail,
      ms: outcome.ms,
      cacheFile,
    },
    `GPU probe failed (${gpu}: ${failure})${outcome.cause ? `: ${outcome.cause}` : ""}; serving on the CPU instead. ` +
      `SWITCHYARD_GPU=${gpu} forces that build, SWITCHYARD_GPU=off skips the probe; delete ${cacheFile} to probe again`,
  );
  writeCache(cacheFile, { ...cache, [key]: verdict }, s.logger);
  return { gpu: false, source: "probed", note: `GPU probe failed: ${gpu}, ${failure}` };
}

/** A cached verdict. */
interface Verdict {
  ok: boolean;
  /** The backend the child ran on (passed), or the one that failed. */
  gpu: LlamaGpuType;
  devices?: string[];
  /** How it failed, and at which stage (`SIGABRT on the first decode`). */
  failure?: string;
  cause?: string;
  ms?: number;
  at: string;
}

function describe(v: Verdict): string {
  if (v.gpu === false) return "no GPU build loads here; the CPU";
  return v.devices && v.devices.length > 0 ? `${v.gpu} (${v.devices.join(", ")})` : v.gpu;
}

/** The banner's note when a GPU was found but the probe's llama.cpp started on the CPU. */
function noGpuNote(gpu: LlamaGpuType, found: LlamaGpuType[]): string | undefined {
  return gpu === false ? `no ${found.join("/")} build loads here` : undefined;
}

function stageNote(outcome: ProbeOutcome): string {
  if (outcome.failure?.startsWith("could not start")) return "";
  switch (outcome.stage) {
    case undefined:
      return " while starting llama.cpp";
    case "backend":
      return " while loading the model";
    case "model":
      return " on the first decode";
    case "decoded":
      return " while freeing the model";
    default:
      return "";
  }
}

/** What decides a verdict (see the module header), as one string. */
async function verdictKey(
  lib: typeof NodeLlamaCpp,
  found: LlamaGpuType[],
  model: ProbeModel | undefined,
): Promise<string> {
  let file = "no model";
  if (model) {
    try {
      const st = statSync(model.path);
      file = `${path.basename(model.path)} ${st.size} ${Math.round(st.mtimeMs)} ${model.kind}`;
    } catch {
      file = `${path.basename(model.path)} ${model.kind}`;
    }
  }
  return [
    `v${PROBE_VERSION}`,
    `node-llama-cpp ${await lib.getModuleVersion()}`,
    `${process.platform}-${process.arch}`,
    `found ${found.join(",")}`,
    `nvidia ${nvidiaDriver()}`,
    `gpus ${nvidiaModels()}`,
    `drm ${drmDevices()}`,
    `cpu ${os.cpus()[0]?.model?.trim() ?? "unknown"}`,
    `kernel ${os.release()}`,
    `CUDA_VISIBLE_DEVICES=${process.env.CUDA_VISIBLE_DEVICES ?? ""}`,
    `LD_LIBRARY_PATH=${process.env.LD_LIBRARY_PATH ?? ""}`,
    file,
  ].join("|");
}

/** The NVIDIA kernel driver's version (Linux), or "none". */
function nvidiaDriver(): string {
  // "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build …"
  const text = readOr("/proc/driver/nvidia/version").split("\n")[0];
  return /\s(\d+\.\d+(?:\.\d+)?)\s/.exec(text)?.[1] ?? (text.trim() || "none");
}

/** The NVIDIA GPUs' model names (Linux), sorted. */
function nvidiaModels(): string {
  const dir = "/proc/driver/nvidia/gpus";
  const names = listOr(dir).map((d) => /^Model:\s*(.+)$/m.exec(readOr(path.join(dir, d, "information")))?.[1]?.trim());
  return (
    names
      .filter((n) => n !== undefined)
      .sort()
      .join(",") || "none"
  );
}

/** The display devices' PCI vendor:device ids (Linux), sorted. */
function drmDevices(): string {
  const dir = "/sys/class/drm";
  const ids = listOr(dir)
    .filter((d) => /^card\d+$/.test(d))
    .map(
      (d) =>
        `${readOr(path.join(dir, d, "device/vendor")).trim()}:${readOr(path.join(dir, d, "device/device")).trim()}`,
    );
  return [...new Set(ids)].sort().join(",") || "none";
}

function readOr(file: string): string {
  try {
    return readFileSync(file, "utf8");
  } catch {
    return "";
  }
}

function listOr(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

type Cache = Record<string, Verdict>;

function readCache(file: string): Cache {
  try {
    const parsed: unknown = JSON.parse(readFileSync(file, "utf8"));
    return parsed && typeof parsed === "object" && !Array.isArray(parsed) ? (parsed as Cache) : {};
  } catch {
    return {};
  }
}

function writeCache(file: string, cache: Cache, logger: Logger): void {
  try {
    mkdirSync(path.dirname(file), { recursive: true });
    const tmp = `${file}.${process.pid}.tmp`;
    writeFileSync(tmp, JSON.stringify(cache, null, 2) + "\n");
    renameSync(tmp, file);
  } catch (err) {
    logger.warn({ err }, "could not write the GPU probe cache");
  }
}
