/**
 * Fetches the test model's file into a folder the way `npm start` fetches the default model
 * (issue 27, item 8): the catalog entry of `tinystories-260k` through `pullModel`, so its source,
 * size and SHA-256 are checked and the file is installed only once verified. Run by
 * `test-models.mjs` (Jest's global setup) as
 * `node --import test/support/swc-loader.mjs test/support/fetch-test-model.ts <folder>`; reads
 * `HF_ENDPOINT` and `HF_TOKEN` as `npm run models -- pull` does. Prints the outcome as one JSON
 * line; on failure prints the reason on stderr and exits 1.
 */
import path from "node:path";
import { loadCatalog } from "../../src/config/catalog.js";
import { packageRoot } from "../../src/config/config.js";
import { pullModel } from "../../src/inference/artifacts/model-store.js";

const [dir] = process.argv.slice(2);
if (!dir) {
  process.stderr.write("usage: fetch-test-model.ts <models folder>\n");
  process.exit(2);
}
const catalog = loadCatalog(path.join(packageRoot, "src/config/catalog.json"));
const model = catalog.models.find((m) => m.id === "tinystories-260k")!;
try {
  const outcome = await pullModel(
    model,
    { modelsDir: path.resolve(dir), dataDir: path.resolve(dir) },
    {
      endpoint: process.env.HF_ENDPOINT || undefined,
      token: process.env.HF_TOKEN || undefined,
      stallMs: 30_000,
      // Two `npm test` runs starting together: the second waits for the first one's pull.
      wait: { timeoutMs: 300_000 },
    },
  );
  process.stdout.write(`${JSON.stringify(outcome)}\n`);
} catch (err) {
  process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
}
