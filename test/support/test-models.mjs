/**
 * Where the test suite's model file comes from (issue 27, item 8: the suite stands alone on a
 * fresh clone). Plain JS, because Jest's global setup imports it outside its TypeScript transform.
 *
 * The folder, in order:
 * 1. `SWITCHYARD_MODELS_DIR` when set (resolved against the repository root);
 * 3. otherwise `<repository>/.data/models`, the folder `npm start` downloads into.
 *
 * When the chosen folder lacks the file (of the catalog's size), it is fetched the way `npm start`
 * fetches the default model: the catalog's source, size and SHA-256 of `tinystories-260k`, through
 * the service's own downloader (`pullModel` in `src/inference/artifacts/model-store.ts`: verified,
 * installed by an atomic rename, one pull at a time). That code is TypeScript with `.js` import
 * specifiers, which plain Node cannot load without a build, so it runs in a child process under
 * `swc-loader.mjs` (`fetch-test-model.ts`), the same loader the process tests use. `HF_ENDPOINT`
 * and `HF_TOKEN` apply as for `npm run models -- pull`; `SWITCHYARD_ALLOW_MODEL_DOWNLOAD=false`
 * (CI, offline) turns the fetch into an error naming the folder.
 */
import { execFile } from "node:child_process";
import { existsSync, readFileSync, statSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const run = promisify(execFile);

/** The repository this file belongs to. */
export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");

/** The catalog model every test serves (its file is the test model). */
export const TEST_MODEL_ID = "tinystories-260k";

/** The test model's catalog engine entry (`file`, `source`, `size_bytes`, `sha256`). */
export function testModelEngine() {
  const catalog = JSON.parse(readFileSync(path.join(REPO_ROOT, "src/config/catalog.json"), "utf8"));
  const model = catalog.models.find((m) => m.id === TEST_MODEL_ID);
  if (!model || model.engine.type !== "llama_cpp") throw new Error(`the catalog has no ${TEST_MODEL_ID} file entry`);
  return model.engine;
}

/** Whether `dir` holds the test model's file with the catalog's size. */
function holds(dir, engine) {
  const file = path.join(dir, engine.file);
  return existsSync(file) && statSync(file).size === engine.size_bytes;
}

/**
 * Finds the folder holding the test model, fetching the file when it is nowhere (see the module
 * header for the order).
 * @param {{root?: string, env?: Record<string, string | undefined>}} [opts] `root`: the repository
 *   root the relative folders are taken from (tests point it elsewhere); `env`: the environment
 *   read (default `process.env`; also handed to the fetching child).
 * @returns {Promise<{dir: string, how: "env" | "data" | "fetched"}>} the absolute folder.
 * @throws Error when the file is missing and downloads are off, or the fetch failed (its one-line
 *   reason: checksum, size, network…; nothing is installed then).
 */
export async function findTestModels(opts = {}) {
  const root = opts.root ?? REPO_ROOT;
  const env = opts.env ?? process.env;
  const engine = testModelEngine();
  let dir;
  let how;
  if (env.SWITCHYARD_MODELS_DIR) {
    dir = path.resolve(root, env.SWITCHYARD_MODELS_DIR);
    how = "env";
  } else {
    // Nothing outside the repository unless SWITCHYARD_MODELS_DIR names it (CI does: .ci/run).
    dir = path.join(root, ".data/models");
    how = "data";
  }
  if (holds(dir, engine)) return { dir, how };
  if (env.SWITCHYARD_ALLOW_MODEL_DOWNLOAD === "false") {
    throw new Error(
      `the test model ${engine.file} is not in ${dir} and SWITCHYARD_ALLOW_MODEL_DOWNLOAD=false: ` +
        `put it there, or set SWITCHYARD_MODELS_DIR to a folder that holds it`,
    );
  }
  const script = path.join(REPO_ROOT, "test/support/fetch-test-model.ts");
  const loader = path.join(REPO_ROOT, "test/support/swc-loader.mjs");
  try {
    await run(process.execPath, ["--import", loader, script, dir], { cwd: REPO_ROOT, env, timeout: 300_000 });
  } catch (err) {
    const reason = String(err.stderr ?? "").trim() || err.message;
    throw new Error(`could not fetch the test model ${engine.file} into ${dir}: ${reason}`);
  }
  return { dir, how: "fetched" };
}
