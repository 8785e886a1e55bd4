/**
 * What `npm start` does about model files (issue 17), before the engines load:
 *
 * - **Pulls at start.** The models of `SWITCHYARD_PULL_ON_START` (for containers) are pulled
 *   first; one that cannot be is a `ConfigError` naming it (the start stops). The default model's
 *   file is pulled too when it is missing and `SWITCHYARD_ALLOW_MODEL_DOWNLOAD` is on (it is the
 *   small test model, about 1 MB), but failing that only logs a warning: offline, the start still
 *   comes up. Nothing else is downloaded at start.
 * - **Banner.** One log line lists the models served, where the engine computes (CPU or GPU),
 *   and the pull command of each model whose file is not here.
 */
import type { Logger } from "pino";
import type { Catalog, CatalogModel } from "../../config/catalog.js";
import { ConfigError } from "../../config/config.js";
import { DownloadError } from "../../inference/engines/llama-cpp/hub-download.js";
import { type ModelDirs, pullCommand, pullModel } from "../../inference/engines/llama-cpp/model-store.js";

export interface StartPullSettings extends ModelDirs {
  /** `SWITCHYARD_PULL_ON_START`. */
  pullOnStart: string[];
  /** `SWITCHYARD_ALLOW_MODEL_DOWNLOAD`: pull a missing default model. */
  allowModelDownload: boolean;
  hfEndpoint?: string;
  hfToken?: string;
}

/**
 * Pulls what the start must (see the module header), logging progress every 10 %.
 * @throws ConfigError for an unknown or file-less id in `pullOnStart`, or a pull of one that failed.
 */
export async function pullAtStart(catalog: Catalog, settings: StartPullSettings, logger: Logger): Promise<void> {
  const wanted = settings.pullOnStart.map((id) => {
    const model = catalog.models.find((m) => m.id === id);
    if (!model) throw new ConfigError(`SWITCHYARD_PULL_ON_START: ${id} is not in the model catalog`);
    if (model.engine.type !== "llama_cpp") {
      throw new ConfigError(`SWITCHYARD_PULL_ON_START: ${id} is served by upstream servers; it has no file to pull`);
    }
    return model;
  });
  const defaultModel = catalog.models.find((m) => m.id === catalog.defaultModel)!;
  const pulls: Array<{ model: CatalogModel; required: boolean }> = wanted.map((model) => ({ model, required: true }));
  if (settings.allowModelDownload && defaultModel.engine.type === "llama_cpp" && !wanted.includes(defaultModel)) {
    pulls.push({ model: defaultModel, required: false });
  }
  for (const { model, required } of pulls) {
    let lastTenth = -1;
    try {
      const outcome = await pullModel(model, settings, {
        endpoint: settings.hfEndpoint,
        token: settings.hfToken,
        // The default model is optional here: an offline host should not hold the start long.
        stallMs: required ? undefined : 15_000,
        onProgress: ({ received, total }) => {
          const tenth = total > 0 ? Math.floor((received / total) * 10) : 0;
          if (tenth === lastTenth) return;
          lastTenth = tenth;
          logger.info({ model: model.id, percent: tenth * 10, bytes: received, total }, "pulling model file");
        },
      });
      if (outcome.kind === "downloaded") {
        logger.info(
          { model: model.id, path: outcome.path, sha256: outcome.sha256, verified: outcome.checksumVerified },
          "model file pulled",
        );
      }
    } catch (err) {
      const reason = err instanceof DownloadError || err instanceof Error ? err.message : String(err);
      if (required) throw new ConfigError(`SWITCHYARD_PULL_ON_START: pulling ${model.id} failed: ${reason}`);
      logger.warn(
        { model: model.id, reason },
        `the default model's file is missing and could not be downloaded; run ${pullCommand(model.id)} ` +
          `or set SWITCHYARD_MODELS_DIR`,
      );
    }
  }
}

/**
 * The start banner (one log line): the models served, the engine's backend, and the pull command
 * of each catalog model whose file is not here.
 */
export function logModelBanner(
  logger: Logger,
  served: CatalogModel[],
  notDownloaded: CatalogModel[],
  backend: string,
): void {
  const parts = [
    `serving ${served.length > 0 ? served.map((m) => m.id).join(", ") : "no model"} (embedded engine on ${backend})`,
  ];
  if (notDownloaded.length > 0) {
    parts.push(
      `not downloaded: ${notDownloaded.map((m) => m.id).join(", ")}; pull with ` +
        notDownloaded.map((m) => pullCommand(m.id)).join(" / "),
    );
  }
  logger.info(
    {
      served: served.map((m) => m.id),
      notDownloaded: notDownloaded.map((m) => ({ id: m.id, pull: pullCommand(m.id) })),
      engine: backend,
    },
    parts.join("; "),
  );
}
