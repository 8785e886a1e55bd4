/**
 * llama.cpp's log in Switchyard's (faults survived: a CUDA error that killed the server on a GPU
 * machine was logged at debug, so a default log never said why): llama.cpp's error lines are
 * logged at error, naming the engine; its warnings, info and debug lines stay at debug.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { LlamaLogLevel } from "node-llama-cpp";
import { packageRoot } from "../src/config/config.js";
import { llamaCppLogger } from "../src/inference/engines/llama-cpp/llama-log.js";
import { MODELS_DIR } from "./support/harness.js";
import { captureLogs } from "./support/log-capture.js";

/** The engine in a process of its own (see the file for why). */
const CHILD = path.join(packageRoot, "test/support/engine-log-child.ts");

test("when llama.cpp logs at each level, then errors go to error, warnings and the rest to debug", () => {
  const logs = captureLogs("debug");
  const log = llamaCppLogger(logs.logger);
  log(LlamaLogLevel.error, "ggml_cuda_compute_forward: CUDA error\n");
  log(LlamaLogLevel.fatal, "fatal thing");
  log(LlamaLogLevel.warn, "load: bad special token");
  log(LlamaLogLevel.warn, "load: bad special token");
  log(LlamaLogLevel.warn, "another warning");
  log(LlamaLogLevel.info, "llama_context: n_ctx = 256");
  log(LlamaLogLevel.log, "...");
  log(LlamaLogLevel.debug, "graph_reserve: reserving");
  log(LlamaLogLevel.error, "  \n");
  expect(logs.records().map((r) => [r.level, r.llamaLevel, r.msg, r.engine])).toEqual([
    [50, "error", "llama.cpp: ggml_cuda_compute_forward: CUDA error", "llama_cpp"],
    [50, "fatal", "llama.cpp: fatal thing", "llama_cpp"],
    [20, "warn", "llama.cpp: load: bad special token", "llama_cpp"],
    [20, "warn", "llama.cpp: load: bad special token", "llama_cpp"],
    [20, "warn", "llama.cpp: another warning", "llama_cpp"],
    [20, "info", "llama.cpp: llama_context: n_ctx = 256", "llama_cpp"],
    [20, "log", "llama.cpp: ...", "llama_cpp"],
    [20, "debug", "llama.cpp: graph_reserve: reserving", "llama_cpp"],
  ]);
});

test("when the engine loads a model and a copy cut short, then llama.cpp's error is logged at error and its warning at debug, naming the engine", async () => {
  const modelsDir = mkdtempSync(path.join(os.tmpdir(), "switchyard-llama-log-models-"));
  const gguf = readFileSync(path.join(MODELS_DIR, "stories260K.gguf"));
  writeFileSync(path.join(modelsDir, "stories260K.gguf"), gguf);
  writeFileSync(path.join(modelsDir, "cut.gguf"), gguf.subarray(0, 800_000));
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "switchyard-llama-log-"));
  const child = spawnSync(
    process.execPath,
    ["--import", path.join(packageRoot, "test/support/swc-loader.mjs"), CHILD, modelsDir, dataDir],
    { cwd: packageRoot, encoding: "utf8", timeout: 90_000 },
  );
  expect(child.status).toBe(0);
  const records = child.stdout
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l) as Record<string, any>);
  const llama = records.filter((r) => r.engine === "llama_cpp");
  // The test model's tokenizer metadata draws a warning at each load: kept out of a default log.
  expect(llama.find((r) => /^llama\.cpp: load: bad special token/.test(r.msg))).toMatchObject({
    level: 20,
    llamaLevel: "warn",
  });
  const error = llama.find((r) => /error loading model/.test(r.msg));
  expect(error).toMatchObject({ level: 50, llamaLevel: "error" });
  expect(error!.msg).toMatch(/^llama\.cpp: llama_model_load: error loading model: .*not within the file bounds/);
  // Only errors reach a default (info) log.
  expect(llama.filter((r) => r.level >= 30).every((r) => r.level >= 50)).toBe(true);
}, 120_000);
