/**
 * Where a catalog model's GGUF file comes from (issue 2, DESIGN §2): the models directory
 * (`SWITCHYARD_MODELS_DIR`) first, then the data-dir cache (`<dataDir>/models`), then a download
 * from the entry's `hf:` source into that cache. Offline, a missing file is a `ConfigError` that
 * names the setting, not a stack trace.
 */
import { existsSync } from "node:fs";
import path from "node:path";
import type { resolveModelFile } from "node-llama-cpp";
import type { CatalogModel, LlamaCppEngineSpec } from "../../../config/catalog.js";
import { ConfigError } from "../../../config/config.js";

export interface ModelFileSettings {
  modelsDir?: string;
  dataDir: string;
  allowModelDownload: boolean;
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
  const candidates = [settings.modelsDir, cacheDir].filter((d): d is string => !!d).map((d) => path.join(d, spec.file));
  for (const file of candidates) if (existsSync(file)) return file;
  const where = `${settings.modelsDir ? settings.modelsDir : "SWITCHYARD_MODELS_DIR (unset)"} or ${cacheDir}`;
  if (!spec.source || !settings.allowModelDownload) {
    throw new ConfigError(
      `model file ${spec.file} for ${model.id} is not in ${where}; set SWITCHYARD_MODELS_DIR to a folder that holds it`,
    );
  }
  try {
    return await lib.resolveModelFile(spec.source, {
      directory: cacheDir,
      fileName: spec.file,
      download: "auto",
      cli: false,
      signal: AbortSignal.timeout(30 * 60_000),
    });
  } catch (err) {
    throw new ConfigError(
      `model file ${spec.file} for ${model.id} is not in ${where}, and downloading ${spec.source} failed ` +
        `(${(err as Error).message}); set SWITCHYARD_MODELS_DIR to a folder that holds it`,
    );
  }
}
