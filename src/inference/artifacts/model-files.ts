/**
 * Where a catalog model's GGUF file comes from (issue 2, DESIGN §2; issue 17): the models
 * directory (`SWITCHYARD_MODELS_DIR`) first, then the data-dir cache (`<dataDir>/models`). The
 * engine never downloads: `npm run models -- pull <id>` does (`model-store.ts`), as does the start
 * for `SWITCHYARD_PULL_ON_START` and a missing default model. A missing file is a `ConfigError`
 * that names the pull command and the setting, not a stack trace.
 */
import { existsSync, statSync } from "node:fs";
import path from "node:path";
import type { CatalogModel, LlamaCppEngineSpec } from "../../config/catalog.js";
import { ConfigError } from "../../config/config.js";

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

/** A model file found on this machine (`inspectLocalModelFile`). */
export interface LocalModelFile {
  path: string;
  /** Bytes on disk. */
  sizeBytes: number;
  /** Last modification, Unix ms: tells a replaced file from the one judged before. */
  mtimeMs: number;
  /**
   * Why it cannot be used, undefined when it can: its size is not the catalog's `size_bytes`
   * (review of issue 17, finding 7: a truncated or damaged copy under the final name).
   */
  problem?: string;
}

/**
 * The local copy of `spec.file` as `findLocalModelFile` finds it, with its size checked against
 * `spec.size_bytes` when the catalog gives one (one `stat`, no read); undefined when absent.
 */
export function inspectLocalModelFile(
  spec: Pick<LlamaCppEngineSpec, "file" | "size_bytes">,
  settings: Pick<ModelFileSettings, "modelsDir" | "dataDir">,
): LocalModelFile | undefined {
  const found = findLocalModelFile(spec.file, settings);
  if (!found) return undefined;
  let info: { size: number; mtimeMs: number };
  try {
    info = statSync(found);
  } catch {
    return undefined; // removed between the two looks
  }
  const problem =
    spec.size_bytes !== undefined && info.size !== spec.size_bytes
      ? `${found} is ${info.size} bytes, the catalog says ${spec.size_bytes} (an incomplete or damaged copy)`
      : undefined;
  return { path: found, sizeBytes: info.size, mtimeMs: info.mtimeMs, problem };
}

/**
 * @returns the absolute path of the model file.
 * @throws ConfigError when the file is in neither folder, or its size is not the catalog's.
 */
export function resolveModelPath(model: CatalogModel, spec: LlamaCppEngineSpec, settings: ModelFileSettings): string {
  const found = inspectLocalModelFile(spec, settings);
  if (found?.problem) {
    throw new ConfigError(
      `model file of ${model.id}: ${found.problem}; replace it with npm run models -- pull ${model.id}`,
    );
  }
  if (found) return found.path;
  const cacheDir = path.join(settings.dataDir, "models");
  const where = `${settings.modelsDir ? settings.modelsDir : "SWITCHYARD_MODELS_DIR (unset)"} or ${cacheDir}`;
  throw new ConfigError(
    `model file ${spec.file} for ${model.id} is not in ${where}: run npm run models -- pull ${model.id}, ` +
      `or set SWITCHYARD_MODELS_DIR to a folder that holds it`,
  );
}
