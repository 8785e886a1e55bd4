/**
 * The catalog's model files on this machine (issue 17): which are present and where, pulling one
 * from its hub (`hub-download.ts`) into the install folder, and removing one. Used by
 * `npm run models` (`src/scripts/models-cli.ts`) and by the start (`SWITCHYARD_PULL_ON_START`,
 * what is served). Only embedded-engine (`llama_cpp`) models have files.
 *
 * The install folder is `SWITCHYARD_MODELS_DIR` when set, else `<dataDir>/models`: the two folders
 * the engine looks in (`model-files.ts`), so a pulled file is found by the next start, and by a
 * running server at the next request for the model. The engine never sees a part: parts are
 * staged in `.partial/` and renamed into place only once verified.
 */
import { readdir, rm, stat } from "node:fs/promises";
import path from "node:path";
import type { CatalogModel, LlamaCppEngineSpec } from "../../../config/catalog.js";
import { type DownloadProgress, type DownloadResult, downloadModelFile, partialPath } from "./hub-download.js";
import { findLocalModelFile } from "./model-files.js";

/** The folders model files live in. */
export interface ModelDirs {
  modelsDir?: string;
  dataDir: string;
}

/** The command that pulls `id` (README "Use a real model"). */
export function pullCommand(id: string): string {
  return `npm run models -- pull ${id}`;
}

/** The `status_reason` of a catalog model whose file is not here, and the 404 message for it. */
export function notDownloadedReason(id: string): string {
  return `not downloaded: run ${pullCommand(id)}`;
}

/** Where `pull` installs files: the models directory when set, else `<dataDir>/models`. */
export function installDir(dirs: ModelDirs): string {
  return dirs.modelsDir ?? path.join(dirs.dataDir, "models");
}

/** One catalog model's file as it stands on this machine. */
export interface ModelFileState {
  model: CatalogModel;
  spec: LlamaCppEngineSpec;
  /** True when the file is in the models directory or the data-dir cache. */
  present: boolean;
  /** Where it is (present) or would be installed (absent). */
  path: string;
  /** Bytes on disk: the file's when present, else those of an interrupted pull (0: none). */
  bytesOnDisk: number;
}

/** The states of the embedded-engine models among `models`, in catalog order. */
export async function modelFileStates(models: CatalogModel[], dirs: ModelDirs): Promise<ModelFileState[]> {
  const out: ModelFileState[] = [];
  for (const model of models) {
    const spec = model.engine;
    if (spec.type !== "llama_cpp") continue;
    const found = findLocalModelFile(spec.file, dirs);
    const target = found ?? path.join(installDir(dirs), spec.file);
    const bytesOnDisk = await stat(found ?? partialPath(target)).then(
      (s) => s.size,
      () => 0,
    );
    out.push({ model, spec, present: found !== undefined, path: target, bytesOnDisk });
  }
  return out;
}

/** Hub settings of a pull. */
export interface PullOptions {
  /** `HF_ENDPOINT`. */
  endpoint?: string;
  /** `HF_TOKEN`. */
  token?: string;
  stallMs?: number;
  signal?: AbortSignal;
  onProgress?: (p: DownloadProgress) => void;
}

/** What a pull did: `present` (nothing to do) or the verified download. */
export type PullOutcome = { kind: "present"; path: string } | ({ kind: "downloaded" } & DownloadResult);

/**
 * Makes `model`'s file present: nothing when it already is, else downloads it from the catalog
 * source into the install folder (verified, atomic: see `hub-download.ts`).
 * @throws DownloadError; Error for a model without a file or a source.
 */
export async function pullModel(model: CatalogModel, dirs: ModelDirs, opts: PullOptions = {}): Promise<PullOutcome> {
  const spec = model.engine;
  if (spec.type !== "llama_cpp") throw new Error(`${model.id} is served by upstream servers; it has no file to pull`);
  const found = findLocalModelFile(spec.file, dirs);
  if (found) return { kind: "present", path: found };
  if (!spec.source) throw new Error(`${model.id} has no source in the catalog to pull it from`);
  const result = await downloadModelFile({
    source: spec.source,
    destination: path.join(installDir(dirs), spec.file),
    sizeBytes: spec.size_bytes,
    sha256: spec.sha256,
    endpoint: opts.endpoint,
    token: opts.token,
    stallMs: opts.stallMs,
    signal: opts.signal,
    onProgress: opts.onProgress,
  });
  return { kind: "downloaded", ...result };
}

/**
 * Deletes `model`'s file from both folders, and any interrupted pull of it.
 * @returns the paths deleted (empty when there was nothing).
 */
export async function removeModel(model: CatalogModel, dirs: ModelDirs): Promise<string[]> {
  const spec = model.engine;
  if (spec.type !== "llama_cpp") return [];
  const removed: string[] = [];
  const folders = [dirs.modelsDir, path.join(dirs.dataDir, "models")].filter((d): d is string => !!d);
  for (const dir of folders) {
    const file = path.join(dir, spec.file);
    const part = partialPath(file);
    for (const candidate of [file, part]) {
      const exists = await stat(candidate).then(
        () => true,
        () => false,
      );
      if (!exists) continue;
      await rm(candidate, { force: true });
      removed.push(candidate);
    }
    await rm(part + ".json", { force: true });
    // An empty staging folder goes too.
    const staging = path.dirname(part);
    if ((await readdir(staging).catch(() => ["?"])).length === 0) await rm(staging, { recursive: true, force: true });
  }
  return removed;
}

/**
 * Which catalog models are served from files on this machine (issue 17): a platform model whose
 * file is missing is listed with `notDownloadedReason` and refused with it (404); one pulled while
 * the server runs is served from its next request on (the engine loads it then).
 */
export class LocalModelFiles {
  /** Models whose file was seen: a file does not vanish under a running server (`rm` is for stopped ones). */
  private readonly seen = new Set<string>();

  constructor(private readonly dirs: ModelDirs) {}

  /** undefined when `model` can be served here, else why not (`notDownloadedReason`). */
  missing(model: CatalogModel): string | undefined {
    const spec = model.engine;
    if (spec.type !== "llama_cpp" || this.seen.has(spec.file)) return undefined;
    if (findLocalModelFile(spec.file, this.dirs)) {
      this.seen.add(spec.file);
      return undefined;
    }
    return notDownloadedReason(model.id);
  }
}
