/**
 * One engine per machine (issue 31, item 2). `SWITCHYARD_ROLE=engine` runs only the embedded
 * engine (node-llama-cpp): it pulls what the start must (`pullAtStart`), loads the catalog's
 * embedded models whose files are here, and serves them to the machine's API processes and
 * worker over loopback (`engine-server.ts`; every request carries `SWITCHYARD_ENGINE_TOKEN`). It
 * runs no HTTP API, no jobs and no database work: the engine needs only the model files
 * (`SWITCHYARD_MODELS_DIR`, `<dataDir>/models`) and its tuning cache (`<dataDir>/engine-tuning.json`).
 *
 * The other side: a process with `SWITCHYARD_ENGINE_URL` builds a `RemoteEngine` where it would
 * build the embedded engine (`embeddedEngine`), so its models are loaded once, in the engine
 * process, whatever the number of API processes.
 */
import type { Logger } from "pino";
import { loadCatalog } from "../config/catalog.js";
import type { Config } from "../config/config.js";
import type { InferenceEngine } from "../inference/engine.js";
import { LocalModelFiles } from "../inference/artifacts/model-store.js";
import { LlamaCppEngine } from "../inference/engines/llama-cpp/llama-cpp.engine.js";
import { startEngineServer } from "../inference/engines/remote/engine-server.js";
import { RemoteEngine } from "../inference/engines/remote/remote.engine.js";
import type { EngineTuning } from "../inference/tuning.js";
import { withSafeErrors } from "../logging.js";
import { pullAtStart } from "../services/models/start-models.js";
import { createLogger } from "./logger.js";

/** The engine that serves `llama_cpp` models in this process: local, or the engine process's. */
export type EmbeddedEngine = InferenceEngine & {
  /** The first generation model's threads and sequences (start banner, batch and custom-model slots). */
  chosenTuning(): EngineTuning | undefined;
  /** What the engine computes on (`cpu`, `cuda`, …). */
  backend(): Promise<string>;
};

/** The embedded engine as configured: the engine process's when `SWITCHYARD_ENGINE_URL` is set, else node-llama-cpp here. */
export function embeddedEngine(config: Config, logger: Logger): EmbeddedEngine {
  if (config.engineUrl) return new RemoteEngine({ url: config.engineUrl, token: config.engineToken! });
  return localEngine(config, logger);
}

/** node-llama-cpp in this process, with the configuration's engine settings. */
function localEngine(config: Config, logger: Logger): LlamaCppEngine {
  return new LlamaCppEngine({
    threads: config.engineThreads,
    sequences: config.engineSequences,
    embeddingContexts: config.engineEmbeddingContexts,
    batchWhileInteractive: config.batchWhileInteractive,
    modelsDir: config.modelsDir,
    dataDir: config.dataDir,
    gpu: config.gpu,
    gpuProbe: { timeoutMs: config.gpuProbeTimeoutS * 1000 },
    scoringTimeLimitMs: config.decisionsTimeLimitMs,
    logger,
  });
}

/** A running engine process. */
export interface EngineProcess {
  /** Where it listens, e.g. `http://127.0.0.1:40123`. */
  url: string;
  port: number;
  logger: Logger;
  /** Stops taking calls, lets the ones in flight finish (30 s at most), then frees every model. */
  close(): Promise<void>;
}

/**
 * Starts an engine process on `config.host`:`config.port` (the supervisor gives it 127.0.0.1 and
 * a free port). Logs "Switchyard engine ready" with the URL and the models loaded.
 * @throws ConfigError for a bad catalog or pull setting; the listen error. A model whose file
 *   fails to load is logged and left out (its callers' loads then fail and mark it not usable).
 */
export async function startEngineProcess(config: Config, opts: { logger?: Logger } = {}): Promise<EngineProcess> {
  const logger = withSafeErrors(opts.logger ?? createLogger(config.logLevel, config.logFormat));
  const catalog = loadCatalog(config.catalogPath);
  const modelDirs = { modelsDir: config.modelsDir, dataDir: config.dataDir };
  await pullAtStart(catalog, { ...config, ...modelDirs }, logger);
  const files = new LocalModelFiles(modelDirs);
  const engine = localEngine(config, logger);
  const started = Date.now();
  const loaded: string[] = [];
  const toLoad = catalog.models.filter(
    (m) => m.engine.type === "llama_cpp" && m.platformStatus !== "coming_soon" && files.missing(m) === undefined,
  );
  // As in one process (`models.ts`): a GPU build named by SWITCHYARD_GPU that does not load stops
  // the start (ConfigError), rather than leaving every embedded model not usable.
  if (config.gpu !== "auto" && config.gpu !== "off" && toLoad.length > 0) await engine.backend();
  for (const model of toLoad) {
    try {
      await engine.load(model);
      loaded.push(model.id);
    } catch (err) {
      logger.error({ err, model: model.id }, "model file could not be loaded; the model is not served");
    }
  }
  const server = await startEngineServer({
    engine,
    token: config.engineToken!,
    host: config.host,
    port: config.port,
    logger,
  }).catch(async (err: unknown) => {
    await engine.close();
    throw err;
  });
  logger.info(
    {
      url: server.url,
      models: loaded,
      ms: Date.now() - started,
      backend: loaded.length > 0 ? await engine.backend() : "idle",
      tuning: engine.chosenTuning(),
    },
    "Switchyard engine ready",
  );
  return {
    url: server.url,
    port: server.port,
    logger,
    close: async () => {
      await server.close();
      await engine.close();
    },
  };
}
