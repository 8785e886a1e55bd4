/** Configuration: defaults, validation naming the setting, the persisted JWT secret, the catalog. */
import { mkdtempSync, readFileSync, statSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { type LlamaCppEngineSpec, loadCatalog } from "../../src/config/catalog.js";
import { ConfigError, loadConfig } from "../../src/config/config.js";
import { resolveModelPath } from "../../src/inference/artifacts/model-files.js";
import { MODELS_DIR } from "../support/harness.js";

const tmp = () => mkdtempSync(path.join(os.tmpdir(), "switchyard-config-"));

test("when nothing is set, then the documented defaults apply", () => {
  const dataDir = tmp();
  const cfg = loadConfig({ SWITCHYARD_DATA_DIR: dataDir });
  expect(cfg).toMatchObject({
    port: 8080,
    engineThreads: "auto",
    engineSequences: "auto",
    batchWhileInteractive: 1,
    workerNice: 10,
    signupCreditMicros: 5_000_000n,
    logLevel: "info",
    publicUrl: "http://localhost:8080",
    gpu: "auto", // issue 17, item 5: the GPU build when a usable GPU is present
    gpuProbeTimeoutS: 300,
  });
  expect(cfg.databaseUrl).toBeUndefined();
  expect(cfg.dataDir).toBe(dataDir);
});

test("when no JWT secret is set, then one is generated once, persisted with mode 0600, and reused", () => {
  const dataDir = tmp();
  const a = loadConfig({ SWITCHYARD_DATA_DIR: dataDir });
  const b = loadConfig({ SWITCHYARD_DATA_DIR: dataDir });
  expect(a.jwtSecret.length).toBeGreaterThanOrEqual(40);
  expect(b.jwtSecret).toBe(a.jwtSecret);
  const file = path.join(dataDir, "jwt-secret");
  expect(readFileSync(file, "utf8").trim()).toBe(a.jwtSecret);
  expect(statSync(file).mode & 0o777).toBe(0o600);
});

test("when a setting is invalid, then ConfigError names the environment variable", () => {
  expect(() => loadConfig({ PORT: "http", SWITCHYARD_DATA_DIR: tmp() })).toThrow(ConfigError);
  expect(() => loadConfig({ PORT: "http", SWITCHYARD_DATA_DIR: tmp() })).toThrow(/PORT/);
  expect(() => loadConfig({ SWITCHYARD_ENGINE_THREADS: "0", SWITCHYARD_DATA_DIR: tmp() })).toThrow(
    /SWITCHYARD_ENGINE_THREADS/,
  );
  expect(() => loadConfig({ LOG_LEVEL: "loud", SWITCHYARD_DATA_DIR: tmp() })).toThrow(/LOG_LEVEL/);
  expect(() => loadConfig({ SWITCHYARD_GPU: "rocm", SWITCHYARD_DATA_DIR: tmp() })).toThrow(/SWITCHYARD_GPU/);
  expect(loadConfig({ SWITCHYARD_GPU: "off", SWITCHYARD_DATA_DIR: tmp() }).gpu).toBe("off");
  // A build may be named (no probe): faults survived, safe defaults.
  expect(loadConfig({ SWITCHYARD_GPU: "cuda", SWITCHYARD_DATA_DIR: tmp() }).gpu).toBe("cuda");
  expect(() => loadConfig({ SWITCHYARD_GPU_PROBE_TIMEOUT_S: "0", SWITCHYARD_DATA_DIR: tmp() })).toThrow(
    /SWITCHYARD_GPU_PROBE_TIMEOUT_S/,
  );
  expect(loadConfig({ SWITCHYARD_GPU_PROBE_TIMEOUT_S: "60", SWITCHYARD_DATA_DIR: tmp() }).gpuProbeTimeoutS).toBe(60);
  // A nice value is 0 (normal) … 19 (lowest CPU priority).
  expect(() => loadConfig({ SWITCHYARD_WORKER_NICE: "20", SWITCHYARD_DATA_DIR: tmp() })).toThrow(
    /SWITCHYARD_WORKER_NICE/,
  );
  expect(() => loadConfig({ SWITCHYARD_WORKER_NICE: "-5", SWITCHYARD_DATA_DIR: tmp() })).toThrow(
    /SWITCHYARD_WORKER_NICE/,
  );
  expect(loadConfig({ SWITCHYARD_WORKER_NICE: "0", SWITCHYARD_DATA_DIR: tmp() }).workerNice).toBe(0);
});

test("when engine threads or sequences are neither auto nor a whole number in range, then ConfigError says what is allowed", () => {
  for (const [name, value] of [
    ["SWITCHYARD_ENGINE_THREADS", "0"],
    ["SWITCHYARD_ENGINE_THREADS", "two"],
    ["SWITCHYARD_ENGINE_THREADS", "1.5"],
    ["SWITCHYARD_ENGINE_SEQUENCES", "257"],
    ["SWITCHYARD_ENGINE_SEQUENCES", "Auto"],
  ]) {
    expect(() => loadConfig({ [name]: value, SWITCHYARD_DATA_DIR: tmp() })).toThrow(
      new RegExp(`${name}: expected auto or a whole number from 1 to 256`),
    );
  }
  expect(() => loadConfig({ SWITCHYARD_BATCH_WHILE_INTERACTIVE: "-1", SWITCHYARD_DATA_DIR: tmp() })).toThrow(
    /SWITCHYARD_BATCH_WHILE_INTERACTIVE/,
  );
  const cfg = loadConfig({
    SWITCHYARD_ENGINE_THREADS: "2",
    SWITCHYARD_ENGINE_SEQUENCES: "auto",
    SWITCHYARD_DATA_DIR: tmp(),
  });
  expect(cfg).toMatchObject({ engineThreads: 2, engineSequences: "auto" });
});

test("when a config file is named, then it is read and the environment overrides it", () => {
  const dir = tmp();
  const file = path.join(dir, "switchyard.json");
  writeFileSync(file, JSON.stringify({ port: 9000, engineSequences: 4, dataDir: dir }));
  const cfg = loadConfig({ SWITCHYARD_CONFIG: file, SWITCHYARD_ENGINE_SEQUENCES: "2" });
  expect(cfg.port).toBe(9000);
  expect(cfg.engineSequences).toBe(2);
});

test("when the shipped catalog is loaded, then prices are exact and the default model is listed", () => {
  const cfg = loadConfig({ SWITCHYARD_DATA_DIR: tmp() });
  const catalog = loadCatalog(cfg.catalogPath);
  expect(catalog.defaultModel).toBe("tinystories-260k");
  const chat = catalog.models.find((m) => m.id === "tinystories-260k")!;
  expect(chat.prices.inputPerMillionMicros).toBe(20_000n);
  const embed = catalog.models.find((m) => m.modality === "text_embedding")!;
  expect(embed.capabilities.dimensions).toBe(64);
  expect(embed.engine).toEqual(expect.objectContaining({ type: "llama_cpp", file: "stories260K.gguf" }));
});

test("when a catalog is invalid, then ConfigError says where", () => {
  const file = path.join(tmp(), "catalog.json");
  writeFileSync(file, JSON.stringify({ default_model: "x", models: [{ id: "x" }] }));
  expect(() => loadCatalog(file)).toThrow(/invalid model catalog .*models\.0/);
});

test("when a catalog price has more than 6 decimals, then ConfigError names the field", () => {
  const file = path.join(tmp(), "catalog.json");
  const shipped = JSON.parse(readFileSync(loadConfig({ SWITCHYARD_DATA_DIR: tmp() }).catalogPath, "utf8"));
  shipped.models[0].pricing.output_per_million_usd = 0.1234567;
  writeFileSync(file, JSON.stringify(shipped));
  expect(() => loadCatalog(file)).toThrow(ConfigError);
  expect(() => loadCatalog(file)).toThrow(/models\.0\.pricing\.output_per_million_usd/);
});

describe("model files", () => {
  const catalog = loadCatalog(loadConfig({ SWITCHYARD_DATA_DIR: tmp() }).catalogPath);
  const model = catalog.models[0];
  const spec = model.engine as LlamaCppEngineSpec;

  test("when the models directory has the file, then it is used", () => {
    const file = resolveModelPath(model, spec, { modelsDir: MODELS_DIR, dataDir: tmp() });
    expect(file).toBe(path.join(MODELS_DIR, "stories260K.gguf"));
  });

  test("when the file is missing, then the engine downloads nothing and the error names the pull command and SWITCHYARD_MODELS_DIR", () => {
    const load = () => resolveModelPath(model, spec, { dataDir: tmp() });
    expect(load).toThrow(ConfigError);
    expect(load).toThrow(/npm run models -- pull tinystories-260k.*SWITCHYARD_MODELS_DIR/);
  });
});
