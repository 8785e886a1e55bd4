/**
 * `npm run models -- list | pull <id…> | rm <id…>` (issue 17): the catalog's model files on this
 * machine. Reads the same configuration as `npm start` (`SWITCHYARD_CATALOG`,
 * `SWITCHYARD_MODELS_DIR`, `SWITCHYARD_DATA_DIR`, `HF_ENDPOINT`, `HF_TOKEN`).
 *
 * - `list`: every catalog model with its size, whether its file is here (or how much of an
 *   interrupted pull is), and where.
 * - `pull`: downloads, verifies (size, SHA-256) and installs each file (`hub-download.ts`); a
 *   progress bar on a terminal (percentage, MB/s, ETA), one line per 10 % otherwise. Ctrl-C
 *   keeps what arrived; the next pull resumes it.
 * - `rm`: deletes a model's file (and any interrupted pull of it). Stop the server first.
 *
 * Exit status 0 when everything asked for was done, 1 otherwise (one line per failure on stderr,
 * no stack trace), 2 for a usage error.
 */
import { type Catalog, type CatalogModel, loadCatalog } from "../config/catalog.js";
import { type Config, ConfigError, loadConfig } from "../config/config.js";
import { DownloadError } from "../inference/artifacts/download-error.js";
import {
  type ModelDirs,
  installDir,
  modelFileStates,
  pullModel,
  removeModel,
} from "../inference/artifacts/model-store.js";
import { ProgressReporter, formatBytes } from "./pull-progress.js";

const USAGE = `usage: npm run models -- list | pull <id…> | rm <id…>`;

class UsageError extends Error {}

/** Runs one command; @returns the exit status. */
async function runModelsCli(
  args: string[],
  out: NodeJS.WriteStream = process.stdout,
  err: NodeJS.WriteStream = process.stderr,
): Promise<number> {
  const [command, ...ids] = args;
  try {
    const config = loadConfig();
    const catalog = loadCatalog(config.catalogPath);
    const dirs: ModelDirs = { modelsDir: config.modelsDir, dataDir: config.dataDir };
    switch (command) {
      case "list":
        await list(catalog, dirs, out);
        return 0;
      case "pull":
        if (ids.length === 0) throw new UsageError("pull needs at least one model id");
        return await pull(pickModels(catalog, ids), dirs, config, out, err);
      case "rm":
        if (ids.length === 0) throw new UsageError("rm needs at least one model id");
        for (const model of pickModels(catalog, ids)) {
          const removed = await removeModel(model, dirs);
          const sharers = sharingFile(catalog, model);
          out.write(
            removed.length === 0
              ? `${model.id}: nothing to remove\n`
              : `${model.id}: removed ${removed.join(", ")}` +
                  (sharers.length > 0 ? ` (also the file of ${sharers.join(", ")})` : "") +
                  "\n",
          );
        }
        return 0;
      default:
        throw new UsageError(command ? `unknown command ${command}` : "no command");
    }
  } catch (e) {
    if (e instanceof UsageError) {
      err.write(`switchyard models: ${e.message}\n${USAGE}\n`);
      return 2;
    }
    if (e instanceof ConfigError || e instanceof DownloadError) {
      err.write(`switchyard models: ${e.message}\n`);
      return 1;
    }
    throw e;
  }
}

/** The catalog models named by `ids`, in that order. @throws UsageError for an unknown id. */
function pickModels(catalog: Catalog, ids: string[]): CatalogModel[] {
  return ids.map((id) => {
    const model = catalog.models.find((m) => m.id === id);
    if (!model) throw new UsageError(`unknown model ${id}; npm run models -- list shows the catalog`);
    if (model.engine.type !== "llama_cpp") throw new UsageError(`${id} is served by upstream servers: no file`);
    return model;
  });
}

function sharingFile(catalog: Catalog, model: CatalogModel): string[] {
  const file = model.engine.type === "llama_cpp" ? model.engine.file : undefined;
  return catalog.models
    .filter((m) => m.id !== model.id && m.engine.type === "llama_cpp" && m.engine.file === file)
    .map((m) => m.id);
}

async function list(catalog: Catalog, dirs: ModelDirs, out: NodeJS.WriteStream): Promise<void> {
  const states = await modelFileStates(catalog.models, dirs);
  const rows = states.map((s) => {
    const size = s.spec.size_bytes ?? (s.present ? s.bytesOnDisk : undefined);
    const status = s.problem
      ? `damaged (${formatBytes(s.bytesOnDisk)}): pull again`
      : s.present
        ? "present"
        : s.bytesOnDisk > 0
          ? `partial ${s.spec.size_bytes ? Math.floor((s.bytesOnDisk / s.spec.size_bytes) * 100) + " %" : formatBytes(s.bytesOnDisk)}`
          : "not downloaded";
    return [
      s.model.id,
      s.model.modality,
      size === undefined ? "?" : formatBytes(size),
      status,
      s.model.license || "-",
      s.present ? s.path : `→ ${s.path}`,
    ];
  });
  const header = ["ID", "MODALITY", "SIZE", "STATUS", "LICENCE", "WHERE"];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  for (const row of [header, ...rows]) {
    out.write(
      row
        .map((c, i) => (i === row.length - 1 ? c : c.padEnd(widths[i])))
        .join("  ")
        .trimEnd() + "\n",
    );
  }
  out.write(`\nPulls install into ${installDir(dirs)}. Pull one with: npm run models -- pull <id>\n`);
}

async function pull(
  models: CatalogModel[],
  dirs: ModelDirs,
  config: Config,
  out: NodeJS.WriteStream,
  err: NodeJS.WriteStream,
): Promise<number> {
  const controller = new AbortController();
  const onSigint = () => controller.abort(new Error("interrupted"));
  process.once("SIGINT", onSigint);
  let failures = 0;
  try {
    for (const model of models) {
      const progress = new ProgressReporter(model.id, out);
      try {
        const outcome = await pullModel(model, dirs, {
          endpoint: config.hfEndpoint,
          token: config.hfToken,
          signal: controller.signal,
          onProgress: (p) => progress.update(p),
        });
        progress.finish();
        if (outcome.kind === "present") {
          out.write(`${model.id}: already present at ${outcome.path}\n`);
          continue;
        }
        const check = outcome.checksumVerified
          ? `SHA-256 ${outcome.sha256} verified`
          : `SHA-256 ${outcome.sha256} (the catalog has no checksum for it: size checked only)`;
        out.write(`${model.id}: installed ${outcome.path} (${formatBytes(outcome.sizeBytes)}, ${check})\n`);
      } catch (e) {
        progress.finish();
        if (controller.signal.aborted) {
          err.write(`switchyard models: ${model.id}: interrupted; run the pull again to resume\n`);
          return 130;
        }
        if (!(e instanceof DownloadError) && !(e instanceof Error)) throw e;
        err.write(`switchyard models: ${model.id}: ${(e as Error).message}\n`);
        failures++;
      }
    }
  } finally {
    process.removeListener("SIGINT", onSigint);
  }
  return failures > 0 ? 1 : 0;
}

runModelsCli(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (e: unknown) => {
    process.stderr.write(`switchyard models: ${e instanceof Error ? e.stack : String(e)}\n`);
    process.exit(1);
  },
);
