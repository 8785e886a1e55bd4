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
import { setTimeout as sleep } from "node:timers/promises";
import type { CatalogModel, LlamaCppEngineSpec } from "../../config/catalog.js";
import { DownloadError, type LockHolder } from "./download-error.js";
import { type DownloadResult, downloadModelFile, partialPath } from "./hub-download.js";
import type { DownloadProgress } from "./hub-transfer.js";
import { clearStalePullLock, inspectPullLock } from "./pull-lock.js";
import { type LocalModelFile, inspectLocalModelFile } from "./model-files.js";

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

/**
 * The `status_reason` of a catalog model whose file is here but cannot be used (`why`: its size is
 * wrong, or it failed to load), and the 404 message for it.
 */
export function notUsableReason(id: string, why: string): string {
  return `not usable: ${why}; replace it with ${pullCommand(id)} (or remove it with npm run models -- rm ${id})`;
}

/** Where `pull` installs files: the models directory when set, else `<dataDir>/models`. */
export function installDir(dirs: ModelDirs): string {
  return dirs.modelsDir ?? path.join(dirs.dataDir, "models");
}

/** One catalog model's file as it stands on this machine. */
export interface ModelFileState {
  model: CatalogModel;
  spec: LlamaCppEngineSpec;
  /** True when the file is in the models directory or the data-dir cache (even if `problem`). */
  present: boolean;
  /** Why the present file cannot be used (its size is not the catalog's). */
  problem?: string;
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
    const found = inspectLocalModelFile(spec, dirs);
    const target = found?.path ?? path.join(installDir(dirs), spec.file);
    const bytesOnDisk =
      found?.sizeBytes ??
      (await stat(partialPath(target)).then(
        (s) => s.size,
        () => 0,
      ));
    out.push({ model, spec, present: found !== undefined, problem: found?.problem, path: target, bytesOnDisk });
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
  /** A pull lock without a heartbeat for this long is taken over, ms (default 60 s). */
  lockStaleMs?: number;
  signal?: AbortSignal;
  onProgress?: (p: DownloadProgress) => void;
  /**
   * Wait for a pull of the same file by another process instead of failing at once (review of
   * issue 17, finding 2: the API and the worker both pulling at start): poll its lock every
   * `pollMs` (default 1 s) for at most `timeoutMs`; when the lock goes away, use the installed
   * file (or pull it, when that pull failed). `onWait` is called at each poll.
   */
  wait?: { timeoutMs: number; pollMs?: number; onWait?: (w: PullWait) => void };
}

/** A pull waiting for another process's pull of the same file (`PullOptions.wait`). */
export interface PullWait {
  lockPath: string;
  holder?: LockHolder;
  /** Bytes of the other pull's part so far. */
  partBytes: number;
  waitedMs: number;
}

/** What a pull did: `present` (nothing to do, or another process pulled it meanwhile) or the verified download. */
export type PullOutcome =
  { kind: "present"; path: string; pulledByOther?: boolean } | ({ kind: "downloaded" } & DownloadResult);

/**
 * Makes `model`'s file present: nothing when it already is (with the catalog's size), else
 * downloads it from the catalog source into the install folder (verified, atomic: see
 * `hub-download.ts`), replacing a copy of the wrong size. With `opts.wait`, waits for another
 * process's pull of the same file (see `PullOptions.wait`).
 * @throws DownloadError (`busy` once the wait is over, naming the lock file); Error for a model
 * without a file or a source.
 */
export async function pullModel(model: CatalogModel, dirs: ModelDirs, opts: PullOptions = {}): Promise<PullOutcome> {
  const spec = model.engine;
  if (spec.type !== "llama_cpp") throw new Error(`${model.id} is served by upstream servers; it has no file to pull`);
  const usable = (): LocalModelFile | undefined => {
    const found = inspectLocalModelFile(spec, dirs);
    return found && !found.problem ? found : undefined;
  };
  const found = usable();
  if (found) return { kind: "present", path: found.path };
  if (!spec.source) throw new Error(`${model.id} has no source in the catalog to pull it from`);
  const destination = path.join(installDir(dirs), spec.file);
  const started = Date.now();
  for (let attempt = 0; ; attempt++) {
    // After a wait: the other pull may have installed the file between the last look and the
    // lock check (it renames, then releases), so look again before pulling it a second time.
    const installed = attempt > 0 ? usable() : undefined;
    if (installed) return { kind: "present", path: installed.path, pulledByOther: true };
    try {
      const result = await downloadModelFile({
        source: spec.source,
        destination,
        sizeBytes: spec.size_bytes,
        sha256: spec.sha256,
        endpoint: opts.endpoint,
        token: opts.token,
        stallMs: opts.stallMs,
        lockStaleMs: opts.lockStaleMs,
        signal: opts.signal,
        onProgress: opts.onProgress,
      });
      return { kind: "downloaded", ...result };
    } catch (err) {
      // Only a lock held by another pull is waited for (not one this pull lost).
      if (!opts.wait || !(err instanceof DownloadError) || err.kind !== "busy" || !err.lock?.holder) throw err;
      const { timeoutMs, pollMs = 1000, onWait } = opts.wait;
      const lockPath = err.lock.path;
      let holder: LockHolder | undefined = err.lock.holder;
      for (;;) {
        const waitedMs = Date.now() - started;
        if (waitedMs >= timeoutMs) {
          throw new DownloadError(
            `${err.message}; gave up after waiting ${Math.round(waitedMs / 1000)} s for it`,
            "busy",
            err.lock,
          );
        }
        const partBytes = await stat(partialPath(destination)).then(
          (s) => s.size,
          () => 0,
        );
        onWait?.({ lockPath, holder, partBytes, waitedMs });
        await sleep(Math.min(pollMs, timeoutMs - waitedMs), undefined, { signal: opts.signal });
        const done = usable();
        if (done) return { kind: "present", path: done.path, pulledByOther: true };
        const lock = await inspectPullLock(lockPath, opts.lockStaleMs);
        if (lock.state !== "live") break; // gone (that pull failed) or stale: pull it here
        holder = lock.holder;
      }
    }
  }
}

/**
 * Deletes `model`'s file from both folders, any interrupted pull of it, and the lock of a pull
 * that died (finding 1).
 * @returns the paths deleted (empty when there was nothing).
 * @throws DownloadError (`busy`) while a pull of the file runs; nothing is deleted then.
 */
export async function removeModel(model: CatalogModel, dirs: ModelDirs): Promise<string[]> {
  const spec = model.engine;
  if (spec.type !== "llama_cpp") return [];
  const removed: string[] = [];
  const folders = [dirs.modelsDir, path.join(dirs.dataDir, "models")].filter((d): d is string => !!d);
  // First the locks: a live one (a pull under way) stops the removal before anything is deleted.
  for (const dir of folders) {
    const lock = partialPath(path.join(dir, spec.file)) + ".lock";
    if (await clearStalePullLock(lock)) removed.push(lock);
  }
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
 * file is missing is listed with `notDownloadedReason` and refused with it (404); one whose file
 * has the wrong size, or failed to load (`markUnusable`), with `notUsableReason`. One pulled while
 * the server runs is served from its next request on (the engine loads it then); one removed
 * (`npm run models -- rm`) is listed as not downloaded again within `recheckMs` (finding 9): a
 * file found is looked at again (one `stat`) at most once per `recheckMs`; a missing one at each call.
 */
export class LocalModelFiles {
  private readonly looks = new Map<string, { at: number; file: LocalModelFile | undefined }>();
  /** Files that failed to load: path → the failure, for the copy (size, mtime) that failed. */
  private readonly failed = new Map<string, { reason: string; sizeBytes: number; mtimeMs: number }>();

  constructor(
    private readonly dirs: ModelDirs,
    private readonly recheckMs = 1000,
  ) {}

  /** undefined when `model` can be served here, else why not (`notDownloadedReason`, `notUsableReason`). */
  missing(model: CatalogModel): string | undefined {
    const spec = model.engine;
    if (spec.type !== "llama_cpp") return undefined;
    const file = this.look(spec);
    if (!file) return notDownloadedReason(model.id);
    if (file.problem) return notUsableReason(model.id, file.problem);
    const failed = this.failed.get(file.path);
    if (failed && failed.sizeBytes === file.sizeBytes && failed.mtimeMs === file.mtimeMs) {
      return notUsableReason(model.id, failed.reason);
    }
    return undefined;
  }

  /**
   * Records that `model`'s file failed to load (`why`: the engine's message): the model is not
   * usable until that file is replaced (another size or modification time).
   */
  markUnusable(model: CatalogModel, why: string): void {
    const spec = model.engine;
    if (spec.type !== "llama_cpp") return;
    const file = inspectLocalModelFile(spec, this.dirs);
    if (!file) return;
    this.failed.set(file.path, {
      reason: `its file ${file.path} could not be loaded (${why})`,
      sizeBytes: file.sizeBytes,
      mtimeMs: file.mtimeMs,
    });
  }

  private look(spec: LlamaCppEngineSpec): LocalModelFile | undefined {
    const key = `${spec.file}\0${spec.size_bytes ?? ""}`;
    const now = Date.now();
    const cached = this.looks.get(key);
    if (cached && now - cached.at < this.recheckMs) return cached.file;
    const file = inspectLocalModelFile(spec, this.dirs);
    // Only a found file is remembered: one pulled meanwhile is served from the next request on.
    if (file) this.looks.set(key, { at: now, file });
    else this.looks.delete(key);
    return file;
  }
}
