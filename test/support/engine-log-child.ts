/**
 * The embedded engine in a process of its own, logging JSON lines (pino) to stdout: it loads the
 * test model, then a copy of it cut short (`<modelsDir>/cut.gguf`), and exits once llama.cpp's
 * error about the cut file has been logged (or after 20 s). Run by `test/llama-log.test.ts` as
 * `node --import test/support/swc-loader.mjs test/support/engine-log-child.ts <modelsDir> <dataDir>`.
 * A process of its own because node-llama-cpp passes llama.cpp's log to the logger of the first
 * `getLlama` in a process only (later ones print it to the console), and a Jest worker may
 * already have started one for another test file.
 */
import path from "node:path";
import { pino } from "pino";
import { type CatalogModel, type LlamaCppEngineSpec, loadCatalog } from "../../src/config/catalog.js";
import { packageRoot } from "../../src/config/config.js";
import { LlamaCppEngine } from "../../src/inference/engines/llama-cpp/llama-cpp.engine.js";

const [modelsDir, dataDir] = process.argv.slice(2);
let sawError = (): void => undefined;
const errorLogged = new Promise<void>((resolve) => (sawError = resolve));
const logger = pino({
  level: "debug",
  hooks: {
    logMethod(args, method) {
      if (String(args.at(-1)).includes("error loading model")) sawError();
      method.apply(this, args);
    },
  },
});
const chat = loadCatalog(path.join(packageRoot, "src/config/catalog.json")).models.find(
  (m) => m.id === "tinystories-260k",
)!;
const spec: LlamaCppEngineSpec = { ...(chat.engine as LlamaCppEngineSpec), file: "cut.gguf", size_bytes: undefined };
const cut: CatalogModel = { ...chat, id: "cut", engine: spec };
const engine = new LlamaCppEngine({
  threads: 1,
  sequences: 2,
  embeddingContexts: 1,
  modelsDir,
  dataDir,
  gpu: "off",
  logger,
});
await engine.load(chat);
await engine.load(cut).catch(() => undefined);
await Promise.race([errorLogged, new Promise((resolve) => setTimeout(resolve, 20_000))]);
await engine.close();
