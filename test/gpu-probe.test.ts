/**
 * The GPU probe (`SWITCHYARD_GPU=auto`; faults survived, safe defaults): a GPU build that kills
 * its process on the first decode (node-llama-cpp's CUDA build on an H200 with a CUDA 13.0
 * driver: SIGABRT) must not take the server down. Before llama.cpp starts on a GPU, a child
 * process decodes with the model; a crash, a non-zero exit or no answer in time leaves the engine
 * on the CPU with the failure logged at error, and the verdict is cached in the data dir so a
 * later start does not probe again. With no GPU found (this machine) no child is started at all.
 *
 * This machine has no GPU, so the probe children here are real processes that behave like the
 * failures seen (abort after a CUDA error line, exit 1, hang) or like a passing probe; one test
 * runs the real probe script on the CPU build, so the script the service runs is exercised too.
 * The GPU detection is given (`["cuda"]`) where a test needs a GPU to be "found".
 */
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import type { LlamaGpuType } from "node-llama-cpp";
import { type CatalogModel, loadCatalog } from "../src/config/catalog.js";
import { packageRoot } from "../src/config/config.js";
import {
  GPU_PROBE_SCRIPT,
  PROBE_LINE_PREFIX,
  type ProbeCommand,
  defaultProbeCommand,
} from "../src/inference/engines/llama-cpp/gpu-probe-child.js";
import { runGpuProbe } from "../src/inference/engines/llama-cpp/gpu-probe-run.js";
import { chooseGpu, gpuProbeCachePath } from "../src/inference/engines/llama-cpp/gpu-probe.js";
import { LlamaCppEngine } from "../src/inference/engines/llama-cpp/llama-cpp.engine.js";
import { CHAT_MODEL, EMBED_MODEL, MODELS_DIR, startTestServer } from "./support/harness.js";
import { captureLogs } from "./support/log-capture.js";

const tmp = (what: string) => mkdtempSync(path.join(os.tmpdir(), `switchyard-gpu-probe-${what}-`));
const scripts = tmp("scripts");
const GGUF = path.join(MODELS_DIR, "stories260K.gguf");
const CUDA_ERROR = "CUDA error: the provided PTX was compiled with an unsupported toolchain.";

/**
 * A stand-in probe child: records each start (its input) in `marker`, then behaves as `how` says:
 * `abort` like the H200 run (backend and model lines, llama.cpp's info lines on stderr, its CUDA
 * error line on stdout as node-llama-cpp prints it, ggml's abort line on stderr, then abort),
 * `exit1`, `hang`, `pass` (a passing CUDA probe) or `cpu` (node-llama-cpp started on the CPU).
 */
const FAKE = path.join(scripts, "fake-probe.mjs");
writeFileSync(
  FAKE,
  `import { appendFileSync, writeSync } from "node:fs";
const [how, marker] = process.argv.slice(2);
appendFileSync(marker, process.argv[process.argv.length - 1] + "\\n");
const say = (o) => writeSync(1, ${JSON.stringify(PROBE_LINE_PREFIX)} + JSON.stringify(o) + "\\n");
if (how === "abort") {
  say({ stage: "backend", gpu: "cuda", devices: ["Fake GPU"] });
  say({ stage: "model", gpuLayers: 6 });
  writeSync(2, "ggml_cuda_init: found 1 CUDA devices\\nllama_context: n_ctx = 256\\n");
  writeSync(1, "${CUDA_ERROR}\\n  current device: 0, in function ggml_cuda_kernel_can_use_pdl\\n");
  writeSync(2, "/x/ggml-cuda.cu:108: CUDA error\\n");
  process.abort();
} else if (how === "exit1") {
  writeSync(2, "probe setup went wrong\\n");
  process.exit(1);
} else if (how === "hang") {
  say({ stage: "backend", gpu: "cuda", devices: ["Fake GPU"] });
  setInterval(() => {}, 1000);
} else {
  const gpu = how === "pass" ? "cuda" : false;
  say({ stage: "backend", gpu, devices: gpu ? ["Fake GPU"] : [] });
  say({ stage: "model", gpuLayers: gpu ? 6 : 0 });
  say({ stage: "decoded" });
  say({ stage: "done" });
  process.exit(0);
}
`,
);

/** The stand-in child behaving as `how`, recording its starts in `marker`. */
function fake(how: string, marker: string): ProbeCommand {
  return { argv: [process.execPath, FAKE, how, marker], cwd: scripts };
}

/** The inputs of the children started with `marker` (one per start). */
function starts(marker: string): Array<Record<string, unknown>> {
  if (!existsSync(marker)) return [];
  return readFileSync(marker, "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

const cuda = async (): Promise<LlamaGpuType[]> => ["cuda", false];
const INPUT = { gpu: "auto", modelPath: GGUF, kind: "generation" } as const;

describe("one probe child", () => {
  test("when the child aborts after a CUDA error, then the outcome names the signal, the stage, the backend and the error line", async () => {
    const marker = path.join(tmp("abort"), "starts");
    const outcome = await runGpuProbe(fake("abort", marker), INPUT, 60_000);
    expect(outcome).toMatchObject({
      ok: false,
      gpu: "cuda",
      devices: ["Fake GPU"],
      stage: "model",
      code: null,
      signal: "SIGABRT",
      timedOut: false,
      failure: "SIGABRT",
      cause: CUDA_ERROR,
    });
    expect(outcome.outputTail).toContain(CUDA_ERROR);
    expect(outcome.outputTail).toContain("ggml-cuda.cu:108: CUDA error");
    expect(outcome.outputTail).not.toContain(PROBE_LINE_PREFIX);
    // The child got the model and how it is served.
    expect(starts(marker)).toEqual([INPUT]);
  });

  test("when the child exits 1, then the outcome says so with its last output line", async () => {
    const outcome = await runGpuProbe(fake("exit1", path.join(tmp("exit1"), "starts")), INPUT, 60_000);
    expect(outcome).toMatchObject({
      ok: false,
      gpu: undefined,
      code: 1,
      signal: null,
      failure: "exit code 1",
      cause: "probe setup went wrong",
    });
  });

  test("when the child does not finish in time, then it is killed and the outcome says it gave no answer", async () => {
    const outcome = await runGpuProbe(fake("hang", path.join(tmp("hang"), "starts")), INPUT, 1_000);
    expect(outcome).toMatchObject({
      ok: false,
      gpu: "cuda",
      stage: "backend",
      timedOut: true,
      signal: "SIGKILL",
      failure: "no answer within 1 s",
    });
  });

  test("when the program does not exist, then the outcome is a failure, not a rejection", async () => {
    const outcome = await runGpuProbe({ argv: [path.join(scripts, "no-such-program")], cwd: scripts }, INPUT, 5_000);
    expect(outcome.ok).toBe(false);
    expect(outcome.failure).toMatch(/^could not start: .*ENOENT/);
  });

  test("when the child finishes, then the outcome passes with the backend and devices it reported", async () => {
    const outcome = await runGpuProbe(fake("pass", path.join(tmp("pass"), "starts")), INPUT, 60_000);
    expect(outcome).toMatchObject({ ok: true, gpu: "cuda", devices: ["Fake GPU"], stage: "done", code: 0 });
    expect(outcome.failure).toBeUndefined();
  });

  test.each(["generation", "embedding"] as const)(
    "when the service's own probe script runs on the CPU build with the test model (%s), then it loads, decodes and finishes",
    async (kind) => {
      const command = defaultProbeCommand();
      expect(command).toEqual({ argv: [process.execPath, "-"], cwd: packageRoot, stdin: GPU_PROBE_SCRIPT });
      const outcome = await runGpuProbe(command, { gpu: false, modelPath: GGUF, kind, threads: 1 }, 120_000);
      expect(outcome).toMatchObject({ ok: true, gpu: false, stage: "done", code: 0 });
    },
    120_000,
  );

  test("when the service's own probe script is given a missing model file, then it exits 2 with the error it met", async () => {
    const modelPath = path.join(scripts, "missing.gguf");
    const outcome = await runGpuProbe(defaultProbeCommand(), { gpu: false, modelPath, kind: "generation" }, 120_000);
    expect(outcome).toMatchObject({ ok: false, gpu: false, stage: "error", code: 2, failure: "exit code 2" });
    expect(outcome.cause).toContain("missing.gguf");
  }, 120_000);
});

describe("choosing the backend", () => {
  const model = { path: GGUF, kind: "generation" as const };

  test("when SWITCHYARD_GPU=off, then the CPU is used without looking for a GPU", async () => {
    const logs = captureLogs("debug");
    const detect = () => Promise.reject(new Error("must not be called"));
    const choice = await chooseGpu(await import("node-llama-cpp"), model, {
      setting: "off",
      dataDir: tmp("off"),
      logger: logs.logger,
      detect,
    });
    expect(choice).toEqual({ gpu: false, source: "setting" });
  });

  test("when SWITCHYARD_GPU names a build, then that build is used without a probe", async () => {
    const marker = path.join(tmp("forced"), "starts");
    const choice = await chooseGpu(await import("node-llama-cpp"), model, {
      setting: "vulkan",
      dataDir: tmp("forced"),
      logger: captureLogs("debug").logger,
      command: fake("abort", marker),
      detect: cuda,
    });
    expect(choice).toEqual({ gpu: "vulkan", source: "setting" });
    expect(starts(marker)).toEqual([]);
  });

  test("when no GPU is found, then the CPU is used and no child is started", async () => {
    const marker = path.join(tmp("nogpu"), "starts");
    const dataDir = tmp("nogpu");
    const choice = await chooseGpu(await import("node-llama-cpp"), model, {
      setting: "auto",
      dataDir,
      logger: captureLogs("debug").logger,
      command: fake("abort", marker),
      detect: async () => [false],
    });
    expect(choice).toEqual({ gpu: false, source: "no gpu" });
    expect(starts(marker)).toEqual([]);
    expect(existsSync(gpuProbeCachePath(dataDir))).toBe(false);
  });

  test("when a found GPU's probe aborts, then the CPU is used, the failure is logged at error and cached, and the next start does not probe", async () => {
    const dataDir = tmp("crash");
    const marker = path.join(dataDir, "starts");
    const lib = await import("node-llama-cpp");
    const logs = captureLogs("info");
    const settings = {
      setting: "auto" as const,
      dataDir,
      logger: logs.logger,
      command: fake("abort", marker),
      detect: cuda,
    };

    const first = await chooseGpu(lib, model, settings);
    expect(first).toEqual({
      gpu: false,
      source: "probed",
      note: "GPU probe failed: cuda, SIGABRT on the first decode",
    });
    const errors = logs.records().filter((r) => r.level === 50);
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatchObject({ gpu: "cuda", signal: "SIGABRT", stage: "model", cause: CUDA_ERROR });
    expect(errors[0].outputTail).toContain("ggml-cuda.cu:108");
    expect(errors[0].msg).toContain(`GPU probe failed (cuda: SIGABRT on the first decode): ${CUDA_ERROR}`);
    expect(errors[0].msg).toContain("serving on the CPU instead");
    expect(errors[0].msg).toContain("SWITCHYARD_GPU=cuda forces that build");
    const cache = JSON.parse(readFileSync(gpuProbeCachePath(dataDir), "utf8"));
    const keys = Object.keys(cache);
    expect(keys).toHaveLength(1);
    expect(keys[0]).toContain(`node-llama-cpp ${await lib.getModuleVersion()}`);
    expect(keys[0]).toContain("found cuda");
    expect(keys[0]).toContain(`stories260K.gguf ${readFileSync(GGUF).length}`);
    expect(cache[keys[0]]).toMatchObject({ ok: false, gpu: "cuda", failure: "SIGABRT on the first decode" });
    expect(starts(marker)).toHaveLength(1);

    const from = logs.lines.length;
    const second = await chooseGpu(lib, model, settings);
    expect(second).toEqual({
      gpu: false,
      source: "cached",
      note: "GPU probe failed: cuda, SIGABRT on the first decode, cached",
    });
    expect(starts(marker)).toHaveLength(1);
    const warned = logs.records(from).filter((r) => r.level === 40);
    expect(warned).toHaveLength(1);
    expect(warned[0].msg).toContain(`Delete ${gpuProbeCachePath(dataDir)} to probe again`);

    // Another model file is another verdict: probed again.
    const embedModel = { path: GGUF, kind: "embedding" as const };
    await chooseGpu(lib, embedModel, settings);
    expect(starts(marker)).toHaveLength(2);
  });

  test.each([
    ["exit1", "exit code 1 while starting llama.cpp"],
    ["hang", "no answer within 1 s while loading the model"],
  ])("when a found GPU's probe ends with %s, then the CPU is used", async (how, failure) => {
    const dataDir = tmp(how);
    const logs = captureLogs("info");
    const choice = await chooseGpu(await import("node-llama-cpp"), model, {
      setting: "auto",
      dataDir,
      logger: logs.logger,
      command: fake(how, path.join(dataDir, "starts")),
      detect: cuda,
      timeoutMs: 1_000,
    });
    expect(choice).toEqual({ gpu: false, source: "probed", note: `GPU probe failed: cuda, ${failure}` });
    expect(logs.records().filter((r) => r.level === 50)).toHaveLength(1);
  });

  test("when a found GPU's probe passes, then that backend is used, and the cached verdict is used next time", async () => {
    const dataDir = tmp("pass");
    const marker = path.join(dataDir, "starts");
    const logs = captureLogs("info");
    const settings = {
      setting: "auto" as const,
      dataDir,
      logger: logs.logger,
      command: fake("pass", marker),
      detect: cuda,
    };
    const lib = await import("node-llama-cpp");
    expect(await chooseGpu(lib, model, settings)).toEqual({ gpu: "cuda", source: "probed" });
    expect(logs.records().find((r) => r.msg === "GPU probe passed: cuda (Fake GPU)")).toBeDefined();
    expect(await chooseGpu(lib, model, settings)).toEqual({ gpu: "cuda", source: "cached" });
    expect(starts(marker)).toHaveLength(1);
    expect(logs.records().filter((r) => r.level >= 40)).toEqual([]);
  });

  test("when a found GPU's build does not load in the child (it starts on the CPU), then the CPU is used and the banner says why", async () => {
    const dataDir = tmp("cpu");
    const choice = await chooseGpu(await import("node-llama-cpp"), model, {
      setting: "auto",
      dataDir,
      logger: captureLogs("info").logger,
      command: fake("cpu", path.join(dataDir, "starts")),
      detect: cuda,
    });
    expect(choice).toEqual({ gpu: false, source: "probed", note: "no cuda build loads here" });
  });
});

describe("the embedded engine", () => {
  const catalog = loadCatalog(path.join(packageRoot, "src/config/catalog.json"));
  const chat = catalog.models.find((m) => m.id === CHAT_MODEL)!;
  const embed = catalog.models.find((m) => m.id === EMBED_MODEL)!;

  function engine(dataDir: string, logs: ReturnType<typeof captureLogs>, gpuProbe: object) {
    return new LlamaCppEngine({
      threads: 1,
      sequences: 2,
      embeddingContexts: 1,
      modelsDir: MODELS_DIR,
      dataDir,
      gpu: "auto",
      gpuProbe,
      logger: logs.logger,
    });
  }

  async function served(e: LlamaCppEngine, model: CatalogModel): Promise<number> {
    await e.load(model);
    return e.countTokens(model, "Once upon a time");
  }

  test("when the GPU probe aborts, then the engine serves on the CPU, says why in its backend, and a second engine uses the cached verdict", async () => {
    const dataDir = tmp("engine");
    const marker = path.join(dataDir, "starts");
    const logs = captureLogs("info");
    const gpuProbe = { command: fake("abort", marker), detect: cuda };
    const first = engine(dataDir, logs, gpuProbe);
    try {
      expect(await served(first, chat)).toBeGreaterThan(0);
      expect(await first.backend()).toBe("cpu (GPU probe failed: cuda, SIGABRT on the first decode)");
    } finally {
      await first.close();
    }
    // The probe decoded with the model being loaded, as it is served.
    expect(starts(marker)).toEqual([{ gpu: "auto", modelPath: GGUF, kind: "generation", threads: 1 }]);

    const second = engine(dataDir, logs, gpuProbe);
    try {
      expect(await served(second, chat)).toBeGreaterThan(0);
      expect(await second.backend()).toBe("cpu (GPU probe failed: cuda, SIGABRT on the first decode, cached)");
    } finally {
      await second.close();
    }
    expect(starts(marker)).toHaveLength(1);
    // An engine whose first model is an embedding model probes with an embedding context.
    const third = engine(dataDir, logs, gpuProbe);
    try {
      expect(await served(third, embed)).toBeGreaterThan(0);
    } finally {
      await third.close();
    }
    expect(starts(marker)[1]).toEqual({ gpu: "auto", modelPath: GGUF, kind: "embedding", threads: 1 });
  }, 60_000);

  test("when the GPU probe passes but the build does not start in the engine's process, then the engine serves on the CPU and says why", async () => {
    const dataDir = tmp("no-start");
    const logs = captureLogs("info");
    // The stand-in probe passes on "cuda"; this machine has no CUDA, so node-llama-cpp refuses it here.
    const e = engine(dataDir, logs, { command: fake("pass", path.join(dataDir, "starts")), detect: cuda });
    try {
      expect(await served(e, chat)).toBeGreaterThan(0);
      expect(await e.backend()).toBe("cpu (cuda did not start)");
    } finally {
      await e.close();
    }
    const error = logs.records().find((r) => r.level === 50);
    expect(error?.msg).toMatch(/^the cuda build did not start \(.*\); serving on the CPU$/);
  }, 60_000);

  test("when SWITCHYARD_GPU=auto on this machine without a GPU, then the CPU is used and no probe child is started", async () => {
    const dataDir = tmp("cpu-only");
    const marker = path.join(dataDir, "starts");
    const e = engine(dataDir, captureLogs("info"), { command: fake("abort", marker) });
    try {
      expect(await served(e, chat)).toBeGreaterThan(0);
      expect(await e.backend()).toBe("cpu");
    } finally {
      await e.close();
    }
    expect(starts(marker)).toEqual([]);
    expect(existsSync(gpuProbeCachePath(dataDir))).toBe(false);
  }, 60_000);
});

test("when SWITCHYARD_GPU=cuda and no CUDA build loads here, then the start stops naming the setting", async () => {
  await expect(startTestServer({ gpu: "cuda" })).rejects.toThrow(
    /^SWITCHYARD_GPU=cuda: node-llama-cpp has no cuda build/,
  );
}, 60_000);
