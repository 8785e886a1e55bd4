/**
 * The models side of the composition root: the platform catalog and its files (issue 17), price
 * versions (issue 10, item 3), the engines (llama.cpp, here or in the machine's engine process
 * (issue 31, item 2), and upstream OpenAI-compatible servers, issue 9, item 3) with the models
 * they serve loaded, and each team's custom models and deployments (issue 9).
 */
import type { Logger } from "pino";
import { loadCatalog } from "../config/catalog.js";
import type { Config } from "../config/config.js";
import { EngineRouter } from "../inference/engine-router.js";
import { DEFAULT_ENGINE_SEQUENCES } from "../inference/tuning.js";
import { LocalModelFiles } from "../inference/artifacts/model-store.js";
import { OpenAiCompatibleEngine } from "../inference/engines/openai-compatible/openai-compatible.engine.js";
import { measuredEngine } from "../inference/measured-engine.js";
import { tracedEngine } from "../inference/traced-engine.js";
import { PriceBook } from "../services/metering/price-book.service.js";
import { ModelCatalogService } from "../services/models/model-catalog.service.js";
import { PlatformModels } from "../services/models/model-sources.js";
import { loadServedModels, logModelBanner, pullAtStart } from "../services/models/start-models.js";
import { TeamModelDirectory } from "../services/models/team-models.js";
import { Metrics } from "../shared/metrics.js";
import { Tracing } from "../shared/tracing.js";
import type { DatabaseParts } from "./database.js";
import { embeddedEngine } from "./engine-process.js";
import type { Lifecycle } from "./lifecycle.js";

/** The models as served by this process. */
export interface ModelParts {
  platform: PlatformModels;
  prices: PriceBook;
  engines: EngineRouter;
  /** Prometheus metrics (issue 13, item 4): one registry per server; engines observed by model. */
  metrics: Metrics;
  /** Traces (issue 29, item 2): engines traced when on; the services and HTTP take it from here. */
  tracing: Tracing;
  /** Generation sequences per model (measured or configured; issue 12, item 3). */
  engineSequences: number;
  /** Slots of one custom model: generation sequences and embedding contexts. */
  customSlots: { generation: number; embedding: number };
  teamModels: TeamModelDirectory;
  catalog: ModelCatalogService;
}

/**
 * Pulls what `config` says to pull at start, records the catalog's prices, builds the engines and
 * starts the components "metering (after engines)" (its stop calls `drainAfterEngines`: failures
 * recorded while the engines shut down are written after them) and "engines", then loads the
 * models whose files are here and the teams' models.
 * @throws ConfigError for a bad catalog or pull setting; a model whose file fails to load is
 *   marked not usable, not a failed start.
 */
export async function startModels(
  config: Config,
  logger: Logger,
  life: Lifecycle,
  { dataSource: ds, bus }: DatabaseParts,
  drainAfterEngines: () => Promise<void>,
  tracing: Tracing = Tracing.off,
): Promise<ModelParts> {
  // Issue 17: files of the catalog's models. The start pulls only what it is told to (and a
  // missing default model); a model whose file is not here is listed as not downloaded.
  const platformCatalog = loadCatalog(config.catalogPath);
  const modelDirs = { modelsDir: config.modelsDir, dataDir: config.dataDir };
  await pullAtStart(platformCatalog, { ...config, ...modelDirs }, logger);
  const localFiles = new LocalModelFiles(modelDirs);
  const platform = new PlatformModels(platformCatalog, localFiles);
  // Pricing history (issue 10, item 3): the catalog's prices become the latest stored versions.
  const prices = new PriceBook(ds, bus, logger);
  await prices.start(platform.catalog.models);
  // Upstream OpenAI-compatible servers (issue 9, item 3): the endpoints of SWITCHYARD_UPSTREAMS.
  const upstream = new OpenAiCompatibleEngine({
    endpoints: config.upstreams,
    connectTimeoutMs: config.upstreamConnectMs,
    headersTimeoutMs: config.upstreamHeadersMs,
    bodyTimeoutMs: config.upstreamIdleMs,
    healthIntervalMs: config.upstreamProbeMs,
    scoringTimeLimitMs: config.decisionsTimeLimitMs,
    logger,
  });
  upstream.checkCatalog(platform.catalog.models);
  // node-llama-cpp here, or the machine's engine process (issue 31, item 2: models loaded once).
  const embedded = embeddedEngine(config, logger);
  const metrics = new Metrics();
  const engines = new EngineRouter({
    openai_compatible: tracedEngine(measuredEngine(upstream, metrics), tracing),
    llama_cpp: tracedEngine(measuredEngine(embedded, metrics), tracing),
  });
  await life.start({ name: "metering (after engines)", start: () => {}, stop: drainAfterEngines });
  await life.start({ name: "engines", start: () => engines, stop: (e) => e.close() });
  const loadStarted = Date.now();
  // An upstream that is down at start does not stop the service: its models answer 503 until
  // a health check finds an endpoint serving them. Models whose file is not here are not loaded
  // (issue 17: listed as not downloaded, 404 with the pull command).
  const offered = platform.catalog.models.filter((m) => m.platformStatus !== "coming_soon");
  const toLoad = offered.filter((m) => platform.unavailable(m) === undefined);
  // A GPU build named by SWITCHYARD_GPU that does not load stops the start (ConfigError), rather
  // than leaving every embedded model marked not usable.
  if (config.gpu !== "auto" && config.gpu !== "off" && toLoad.some((m) => m.engine.type === "llama_cpp")) {
    await embedded.backend();
  }
  // A model whose file fails to load is marked not usable, not a failed start (issue 17 review).
  const served = await loadServedModels(engines, toLoad, localFiles, logger);
  logger.info({ ms: Date.now() - loadStarted, models: served.length }, "models loaded");
  // Engine scheduling (issue 12, item 3): threads and sequences as measured for the first
  // generation model (or configured); the batch runner and custom models size themselves by it.
  const tuning = embedded.chosenTuning();
  const engineSequences =
    config.engineSequences === "auto" ? (tuning?.sequences ?? DEFAULT_ENGINE_SEQUENCES) : config.engineSequences;
  logModelBanner(
    logger,
    served,
    offered.filter((m) => !served.includes(m)).map((m) => ({ model: m, reason: platform.unavailable(m) })),
    // Starting llama.cpp only to name its backend costs ~2 s when no embedded model loaded.
    served.some((m) => m.engine.type === "llama_cpp") ? await embedded.backend() : "idle",
    tuning,
  );

  // Issue 9: each team's custom models and deployments, in memory (NOTIFY keeps them fresh), so
  // the catalog resolves a team's models without a database round trip per request.
  const customSlots = { generation: engineSequences, embedding: config.engineEmbeddingContexts };
  const teamModels = new TeamModelDirectory(ds, bus, platform, engines, logger, customSlots);
  await teamModels.start();
  const catalog = new ModelCatalogService(platform, teamModels);
  return { platform, prices, engines, metrics, tracing, engineSequences, customSlots, teamModels, catalog };
}
