/**
 * What `npm start` does about model files (issue 17), before the engines load:
 *
 * - **Pulls at start.** The models of `SWITCHYARD_PULL_ON_START` (for containers) are pulled
 *   first; one that cannot be is a `ConfigError` naming it (the start stops). When another
 *   process pulls the same file (the API and the worker starting together), the start waits for
 *   it, logging its progress, for at most `SWITCHYARD_PULL_WAIT_S`, then uses the file it
 *   installed (review of issue 17, finding 2). The default model's
 *   file is pulled too when it is missing and `SWITCHYARD_ALLOW_MODEL_DOWNLOAD` is on (it is the
 *   small test model, about 1 MB), but failing that only logs a warning: offline, the start still
 *   comes up. Nothing else is downloaded at start.
 * - **Loading.** `loadServedModels` loads each model whose file is here; one that fails to load
 *   (a damaged file) is marked not usable, with the reason as its `status_reason`, and the start
 *   goes on (finding 7).
 * - **Banner.** One log line lists the models served, where the engine computes (CPU or GPU),
 *   the pull command of each model whose file is not here, and the models whose file is here
 *   but not usable.
 */
import type { Logger } from "pino";
import type { Catalog, CatalogModel } from "../../config/catalog.js";
import { ConfigError } from "../../config/config.js";
import type { EngineRouter } from "../../inference/engine-router.js";
import type { EngineTuning } from "../../inference/tuning.js";
import { DownloadError } from "../../inference/artifacts/download-error.js";
import { redactUrl } from "../../inference/artifacts/hub-request.js";
import {
  type LocalModelFiles,
  type ModelDirs,
  type PullWait,
  notDownloadedReason,
  pullCommand,
  pullModel,
} from "../../inference/artifacts/model-store.js";
import { AppError } from "../../shared/errors.js";

export interface StartPullSettings extends ModelDirs {
  /** `SWITCHYARD_PULL_ON_START`. */
  pullOnStart: string[];
  /** `SWITCHYARD_ALLOW_MODEL_DOWNLOAD`: pull a missing default model. */
  allowModelDownload: boolean;
  hfEndpoint?: string;
  hfToken?: string;
  /** `SWITCHYARD_PULL_WAIT_S`: how long to wait for another process's pull of the same file (default 1800). */
  pullWaitS?: number;
  /** Poll interval while waiting, ms (default 1000; tests). */
  pullWaitPollMs?: number;
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
    let lastWaitLog = -Infinity;
    const onWait = (w: PullWait) => {
      if (w.waitedMs - lastWaitLog < 10_000) return;
      lastWaitLog = w.waitedMs;
      const total = model.engine.type === "llama_cpp" ? model.engine.size_bytes : undefined;
      logger.info(
        {
          model: model.id,
          lock: w.lockPath,
          holder: w.holder && { pid: w.holder.pid, host: w.holder.host },
          bytes: w.partBytes,
          total,
          waitedS: Math.round(w.waitedMs / 1000),
        },
        "waiting for another process's pull of the model file",
      );
    };
    try {
      const outcome = await pullModel(model, settings, {
        endpoint: settings.hfEndpoint,
        token: settings.hfToken,
        // The default model is optional here: an offline host should not hold the start long.
        stallMs: required ? undefined : 15_000,
        wait: {
          timeoutMs: (required ? (settings.pullWaitS ?? 1800) : 60) * 1000,
          pollMs: settings.pullWaitPollMs,
          onWait,
        },
        onProgress: ({ received, total }) => {
          const tenth = total > 0 ? Math.floor((received / total) * 10) : 0;
          if (tenth === lastTenth) return;
          lastTenth = tenth;
          logger.info({ model: model.id, percent: tenth * 10, bytes: received, total }, "pulling model file");
        },
      });
      if (outcome.kind === "present" && outcome.pulledByOther) {
        logger.info({ model: model.id, path: outcome.path }, "model file pulled by another process");
      }
      if (outcome.kind === "downloaded") {
        logger.info(
          { model: model.id, path: outcome.path, sha256: outcome.sha256, verified: outcome.checksumVerified },
          "model file pulled",
        );
      }
    } catch (err) {
      const reason = redactUrl(err instanceof DownloadError || err instanceof Error ? err.message : String(err));
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
 * Loads `served` (the platform models whose files are here) before the first request. A model
 * whose engine is unavailable for now (an upstream that is down) is logged and answers 503 until
 * it is back; an embedded model whose file fails to load (a damaged GGUF: finding 7) is marked not
 * usable in `files` (its `status_reason` and 404 say why) instead of stopping the start.
 * @returns the models loaded or left to their engine (`served` without the unusable ones).
 */
export async function loadServedModels(
  engines: EngineRouter,
  served: CatalogModel[],
  files: LocalModelFiles,
  logger: Logger,
): Promise<CatalogModel[]> {
  const out: CatalogModel[] = [];
  for (const model of served) {
    try {
      await engines.loadAll([model], (m, err) =>
        logger.warn(
          { model: m.id, reason: err.detail },
          "model unavailable at start; it answers 503 until its engine is back",
        ),
      );
      out.push(model);
    } catch (err) {
      if (model.engine.type !== "llama_cpp") throw err;
      const why = (err instanceof AppError ? err.detail : (err as Error).message).split("\n")[0];
      files.markUnusable(model, why);
      logger.error({ model: model.id, reason: why }, "model file could not be loaded; the model is not served");
    }
  }
  return out;
}

/**
 * The start banner (one log line): the models served, the engine's backend (`cpu`, a GPU
 * backend, or `idle` when no embedded model loaded: llama.cpp is not started just to name it),
 * the engine's threads and sequences (issue 12, item 3: measured, cached or configured, with the
 * measured tokens/s), the pull command of each catalog model whose file is not here, and each
 * model whose file is here but not usable (wrong size, failed to load) with why and the pull that
 * replaces it. `notServed` pairs each offered model that is not served with its `status_reason`
 * (`notDownloadedReason` or `notUsableReason`). Log fields: `served` (ids), `notDownloaded`
 * (`{id, pull}`), `notUsable` (`{id, reason}`), `engine`.
 */
export function logModelBanner(
  logger: Logger,
  served: CatalogModel[],
  notServed: Array<{ model: CatalogModel; reason: string | undefined }>,
  backend: string,
  tuning?: EngineTuning,
): void {
  const notDownloaded = notServed.filter((n) => n.reason === undefined || n.reason === notDownloadedReason(n.model.id));
  const notUsable = notServed.filter((n) => !notDownloaded.includes(n));
  const engine =
    backend === "idle"
      ? "(embedded engine not started: no model file here)"
      : `(embedded engine on ${backend}` +
        (tuning ? `, ${tuning.threads} thread(s), ${tuning.sequences} sequences ${tuning.source}` : "") +
        ")";
  const parts = [`serving ${served.length > 0 ? served.map((m) => m.id).join(", ") : "no model"} ${engine}`];
  if (notDownloaded.length > 0) {
    parts.push(
      `not downloaded: ${notDownloaded.map((n) => n.model.id).join(", ")}; pull with ` +
        notDownloaded.map((n) => pullCommand(n.model.id)).join(" / "),
    );
  }
  if (notUsable.length > 0) {
    parts.push(
      `file not usable: ${notUsable.map((n) => n.model.id).join(", ")} (their status_reason says why); replace with ` +
        notUsable.map((n) => pullCommand(n.model.id)).join(" / "),
    );
  }
  logger.info(
    {
      served: served.map((m) => m.id),
      notDownloaded: notDownloaded.map((n) => ({ id: n.model.id, pull: pullCommand(n.model.id) })),
      notUsable: notUsable.map((n) => ({ id: n.model.id, reason: n.reason })),
      engine: backend,
      ...(tuning ? { tuning } : {}),
    },
    parts.join("; "),
  );
}
