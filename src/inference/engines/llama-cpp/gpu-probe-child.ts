/**
 * The GPU probe's child process (see `gpu-probe.ts`): a small script run by this Node
 * (`process.execPath`) that starts llama.cpp the way the engine does (`getLlama` with
 * `build: "never"`), loads the model about to be served, creates a context and decodes a few
 * tokens (or embeds a short text for an embedding model), then exits 0. A GPU build that kills its
 * process on the first decode (node-llama-cpp 3.22.1's CUDA build on an H200 with a CUDA 13.0
 * driver: SIGABRT, "the provided PTX was compiled with an unsupported toolchain") kills this child
 * instead of the server.
 *
 * The child reports its progress as lines `switchyard-gpu-probe {json}` on stdout (written
 * synchronously, so a line written before an abort is not lost): `backend` (`gpu`, `devices`),
 * `model` (`gpuLayers`), `decoded`, `done`, or `error` (`message`, then exit code 2). llama.cpp's
 * own log is printed at once (node-llama-cpp's `debug`: error lines on stdout, the others on
 * stderr), for the same reason.
 */
import { packageRoot } from "../../../config/config.js";
import type { LlamaGpuType } from "node-llama-cpp";

/** What the probe runs with: a `getLlama` GPU option and the model to decode with. */
export interface ProbeInput {
  /** `getLlama`'s `gpu`: `auto` in service (the GPU node-llama-cpp would choose). */
  gpu: "auto" | LlamaGpuType;
  /** The model file (absolute); none: only llama.cpp is started. */
  modelPath?: string;
  /** How the model is served: a generation context decodes, an embedding context embeds. */
  kind: "generation" | "embedding";
  /** CPU threads of the probe's context (`SWITCHYARD_ENGINE_THREADS` when a number); default node-llama-cpp's. */
  threads?: number;
}

/**
 * A probe process to start: `argv[0]` is the program; the input's JSON is appended as the last
 * argument, and `stdin` (when given) is written to its standard input.
 */
export interface ProbeCommand {
  argv: string[];
  /** Working folder (the service's package root: where `node-llama-cpp` resolves from). */
  cwd: string;
  stdin?: string;
}

/** The prefix of the child's progress lines on stdout. */
export const PROBE_LINE_PREFIX = "switchyard-gpu-probe ";

/**
 * The child's source: a CommonJS script read from stdin (`node -`), its input the JSON in its last
 * argument. Not `--eval`, nor `--input-type`: node-llama-cpp forks a process (with this one's
 * `execArgv`) to test a binary before loading it, and that fork would run the evaluated script
 * again, or refuse `--input-type` with a file.
 */
export const GPU_PROBE_SCRIPT = `
const { writeSync } = require("node:fs");
const input = JSON.parse(process.argv[process.argv.length - 1]);
const say = (report) => writeSync(1, ${JSON.stringify(PROBE_LINE_PREFIX)} + JSON.stringify(report) + "\\n");
(async () => {
  const { getLlama } = await import("node-llama-cpp");
  const llama = await getLlama({ gpu: input.gpu, build: "never", debug: true });
  say({ stage: "backend", gpu: llama.gpu, devices: await llama.getGpuDeviceNames() });
  if (input.modelPath) {
    const model = await llama.loadModel({ modelPath: input.modelPath });
    say({ stage: "model", gpuLayers: model.gpuLayers });
    const contextOptions = { contextSize: Math.min(256, model.trainContextSize), threads: input.threads };
    if (input.kind === "embedding") {
      const context = await model.createEmbeddingContext(contextOptions);
      await context.getEmbeddingFor("Switchyard GPU probe");
      await context.dispose();
    } else {
      const context = await model.createContext(contextOptions);
      const bos = model.tokens.bos;
      const prompt = bos != null ? [bos] : model.tokenize("Once upon a time");
      let tokens = 0;
      for await (const token of context.getSequence().evaluate(prompt, { temperature: 0 })) {
        if (++tokens >= 4) break;
      }
      await context.dispose();
    }
    say({ stage: "decoded" });
    await model.dispose();
  }
  await llama.dispose();
  say({ stage: "done" });
  process.exit(0);
})().catch((err) => {
  say({ stage: "error", message: String((err && err.message) || err) });
  process.exit(2);
});
`;

/** The probe as the service runs it: this Node reading `GPU_PROBE_SCRIPT` from stdin in the package root. */
export function defaultProbeCommand(): ProbeCommand {
  return { argv: [process.execPath, "-"], cwd: packageRoot, stdin: GPU_PROBE_SCRIPT };
}
