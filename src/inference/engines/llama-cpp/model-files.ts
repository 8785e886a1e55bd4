/**
 * Where a catalog model's GGUF file comes from (issue 2, DESIGN §2): the models directory
 * (`SWITCHYARD_MODELS_DIR`) first, then the data-dir cache (`<dataDir>/models`), then a download
 * from the entry's `hf:` source into that cache. Offline, a missing file is a `ConfigError` that
 * names the setting, not a stack trace.
 */
import { existsSync } from "node:fs";
import path from "node:path";
import type { resolveModelFile } from "node-llama-cpp";
import type { Logger } from "pino";
import type { CatalogModel, LlamaCppEngineSpec } from "../../../config/catalog.js";
import { ConfigError } from "../../../config/config.js";

export interface ModelFileSettings {
  modelsDir?: string;
  dataDir: string;
  allowModelDownload: boolean;
  logger?: Pick<Logger, "info">;
}

/** A download that receives nothing for this long is abandoned (offline hosts often hang), ms. */
const STALL_MS = 15_000;

/**
 * The local copy of model file `file` (a bare file name): in the models directory, else in the
 * data-dir cache; undefined when neither holds it (nothing is downloaded).
 */
export function findLocalModelFile(
  file: string,
  settings: Pick<ModelFileSettings, "modelsDir" | "dataDir">,
): string | undefined {
  const dirs = [settings.modelsDir, path.join(settings.dataDir, "models")].filter((d): d is string => !!d);
  return dirs.map((d) => path.join(d, file)).find((candidate) => existsSync(candidate));
}

/**
 * @returns the absolute path of the model file.
 * @throws ConfigError when the file is in neither folder and cannot be downloaded.
 */
export async function resolveModelPath(
  model: CatalogModel,
  spec: LlamaCppEngineSpec,
  settings: ModelFileSettings,
  lib: { resolveModelFile: typeof resolveModelFile },
): Promise<string> {
  const cacheDir = path.join(settings.dataDir, "models");
  const found = findLocalModelFile(spec.file, settings);
  if (found) return found;
  const where = `${settings.modelsDir ? settings.modelsDir : "SWITCHYARD_MODELS_DIR (unset)"} or ${cacheDir}`;
  if (!spec.source || !settings.allowModelDownload) {
    throw new ConfigError(
      `model file ${spec.file} for ${model.id} is not in ${where}; set SWITCHYARD_MODELS_DIR to a folder that holds it`,
    );
  }
  // Offline, connections to the hub can hang rather than fail: give up when no byte arrives
  // for STALL_MS, and report progress in the log meanwhile.
  const controller = new AbortController();
  const stall = () => controller.abort(new Error(`no data for ${STALL_MS / 1000} s`));
  let watchdog = setTimeout(stall, STALL_MS);
  let done = false;
  let received = 0;
  let lastLogged = -1;
  settings.logger?.info(
    { model: model.id, source: spec.source, into: cacheDir },
    "model file not found locally; downloading",
  );
  try {
    // The library does not honour the signal while it resolves the source: race the watchdog.
    const aborted = new Promise<never>((_, reject) =>
      controller.signal.addEventListener("abort", () => reject(controller.signal.reason), { once: true }),
    );
    const download = lib.resolveModelFile(spec.source, {
      directory: cacheDir,
      fileName: spec.file,
      download: "auto",
      cli: false,
      signal: controller.signal,
      onProgress: ({ totalSize, downloadedSize }) => {
        if (done || downloadedSize <= received) return; // only arriving bytes feed the watchdog
        received = downloadedSize;
        clearTimeout(watchdog);
        watchdog = setTimeout(stall, STALL_MS);
        const tenth = totalSize > 0 ? Math.floor((downloadedSize / totalSize) * 10) : 0;
        if (tenth !== lastLogged) {
          lastLogged = tenth;
          settings.logger?.info(
            { model: model.id, percent: tenth * 10, bytes: downloadedSize },
            "downloading model file",
          );
        }
      },
    });
    return await Promise.race([download, aborted]);
  } catch (err) {
    const reason = controller.signal.aborted ? (controller.signal.reason as Error).message : (err as Error).message;
    throw new ConfigError(
      `model file ${spec.file} for ${model.id} is not in ${where}, and downloading ${spec.source} failed ` +
        `(${reason}); set SWITCHYARD_MODELS_DIR to a folder that holds it`,
    );
  } finally {
    done = true;
    clearTimeout(watchdog);
  }
}
