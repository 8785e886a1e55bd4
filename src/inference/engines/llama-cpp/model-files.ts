/**
 * Where a catalog model's GGUF file comes from (issue 2, DESIGN §2; issue 17): the models
 * directory (`SWITCHYARD_MODELS_DIR`) first, then the data-dir cache (`<dataDir>/models`). The
 * engine never downloads: `npm run models -- pull <id>` does (`model-store.ts`), as does the start
 * for `SWITCHYARD_PULL_ON_START` and a missing default model. A missing file is a `ConfigError`
 * that names the pull command and the setting, not a stack trace.
 */
import { existsSync } from "node:fs";
import path from "node:path";
import type { CatalogModel, LlamaCppEngineSpec } from "../../../config/catalog.js";
import { ConfigError } from "../../../config/config.js";

export interface ModelFileSettings {
  modelsDir?: string;
  dataDir: string;
}

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
 * @throws ConfigError when the file is in neither folder.
 */
export function resolveModelPath(model: CatalogModel, spec: LlamaCppEngineSpec, settings: ModelFileSettings): string {
  const found = findLocalModelFile(spec.file, settings);
  if (found) return found;
  const cacheDir = path.join(settings.dataDir, "models");
  const where = `${settings.modelsDir ? settings.modelsDir : "SWITCHYARD_MODELS_DIR (unset)"} or ${cacheDir}`;
  throw new ConfigError(
    `model file ${spec.file} for ${model.id} is not in ${where}: run npm run models -- pull ${model.id}, ` +
      `or set SWITCHYARD_MODELS_DIR to a folder that holds it`,
  );
}
