/**
 * One engine per machine (issue 31, item 2), its settings: `SWITCHYARD_ENGINE_PROCESS`
 * (auto/on/off), when the supervisor starts an engine process, and the secret an engine process
 * and its callers must share.
 */
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { runsEngineProcess, supervises } from "../../src/app/supervisor.js";
import { ConfigError, loadConfig, packageRoot } from "../../src/config/config.js";

const tmp = () => mkdtempSync(path.join(os.tmpdir(), "switchyard-engine-config-"));
const TOKEN = "t".repeat(32);

/** The configuration from `env` (a fresh data folder). */
const config = (env: Record<string, string>) => loadConfig({ SWITCHYARD_DATA_DIR: tmp(), ...env });

/** The shipped catalog with every model served by upstream servers instead (no embedded model). */
function upstreamOnlyCatalog(): string {
  const catalog = JSON.parse(readFileSync(path.join(packageRoot, "src/config/catalog.json"), "utf8")) as {
    models: Array<{ id: string; engine: { type: string } }>;
  };
  for (const m of catalog.models) m.engine = { type: "openai_compatible" };
  const file = path.join(tmp(), "catalog.json");
  writeFileSync(file, JSON.stringify(catalog));
  return file;
}

test("when nothing is set, then the engine process is auto and this process runs its own engine", () => {
  const cfg = config({});
  expect(cfg.engineProcess).toBe("auto");
  expect(cfg.engineUrl).toBeUndefined();
  expect(runsEngineProcess(cfg)).toBe(false);
  expect(supervises(cfg)).toBe(false);
});

test("when several API processes run and the catalog has embedded models, then auto starts an engine process", () => {
  expect(runsEngineProcess(config({ SWITCHYARD_API_PROCESSES: "2" }))).toBe(true);
  expect(runsEngineProcess(config({ SWITCHYARD_API_PROCESSES: "2", SWITCHYARD_ENGINE_PROCESS: "off" }))).toBe(false);
  const upstreamOnly = upstreamOnlyCatalog();
  expect(runsEngineProcess(config({ SWITCHYARD_API_PROCESSES: "2", SWITCHYARD_CATALOG: upstreamOnly }))).toBe(false);
});

test("when the engine process is on, then one API process is supervised too, with an engine process beside it", () => {
  const cfg = config({ SWITCHYARD_ENGINE_PROCESS: "on" });
  expect(supervises(cfg)).toBe(true);
  expect(runsEngineProcess(cfg)).toBe(true);
  expect(supervises(config({ SWITCHYARD_ENGINE_PROCESS: "on", SWITCHYARD_ROLE: "worker" }))).toBe(false);
});

test("when SWITCHYARD_ENGINE_URL names an engine process already, then the supervisor starts none", () => {
  const cfg = config({
    SWITCHYARD_API_PROCESSES: "2",
    SWITCHYARD_ENGINE_PROCESS: "on",
    SWITCHYARD_ENGINE_URL: "http://127.0.0.1:7000",
    SWITCHYARD_ENGINE_TOKEN: TOKEN,
  });
  expect(runsEngineProcess(cfg)).toBe(false);
});

test("when an engine process or its caller has no SWITCHYARD_ENGINE_TOKEN, then the start is refused naming it", () => {
  expect(() => config({ SWITCHYARD_ENGINE_URL: "http://127.0.0.1:7000" })).toThrow(ConfigError);
  expect(() => config({ SWITCHYARD_ENGINE_URL: "http://127.0.0.1:7000" })).toThrow(/SWITCHYARD_ENGINE_TOKEN/);
  expect(() => config({ SWITCHYARD_ROLE: "engine" })).toThrow(/SWITCHYARD_ROLE=engine needs SWITCHYARD_ENGINE_TOKEN/);
  expect(() => config({ SWITCHYARD_ROLE: "engine", SWITCHYARD_ENGINE_TOKEN: "short" })).toThrow(
    /SWITCHYARD_ENGINE_TOKEN/,
  );
  expect(() => config({ SWITCHYARD_ENGINE_URL: "not a url", SWITCHYARD_ENGINE_TOKEN: TOKEN })).toThrow(
    /SWITCHYARD_ENGINE_URL/,
  );
  expect(config({ SWITCHYARD_ROLE: "engine", SWITCHYARD_ENGINE_TOKEN: TOKEN })).toMatchObject({ role: "engine" });
  expect(supervises(config({ SWITCHYARD_ROLE: "engine", SWITCHYARD_ENGINE_TOKEN: TOKEN }))).toBe(false);
});

test("when SWITCHYARD_GPU names a build that does not load here, then the engine process refuses to start", async () => {
  // A GPU build this machine cannot load (node-llama-cpp's `metal` quietly falls back to the CPU
  // off macOS, so it is not one); on a machine where both load there is nothing to refuse.
  const lib = await import("node-llama-cpp");
  const loads = (gpu: "cuda" | "vulkan") =>
    lib.getLlama({ gpu, build: "never", logLevel: lib.LlamaLogLevel.disabled }).then(
      async (llama) => (await llama.dispose(), true),
      () => false,
    );
  const missing = !(await loads("vulkan")) ? "vulkan" : !(await loads("cuda")) ? "cuda" : undefined;
  if (!missing) return;
  const { startEngineProcess } = await import("../../src/app/engine-process.js");
  const { MODELS_DIR } = await import("../support/harness.js");
  const cfg = config({
    SWITCHYARD_ROLE: "engine",
    SWITCHYARD_ENGINE_TOKEN: TOKEN,
    SWITCHYARD_GPU: missing,
    SWITCHYARD_MODELS_DIR: MODELS_DIR,
    SWITCHYARD_ALLOW_MODEL_DOWNLOAD: "false",
    PORT: "0",
    LOG_LEVEL: "silent",
  });
  const started = startEngineProcess(cfg);
  await expect(started).rejects.toBeInstanceOf(ConfigError);
  await expect(started).rejects.toThrow(new RegExp(`SWITCHYARD_GPU=${missing}`));
}, 60_000);
