/**
 * Configuration of a Switchyard that a bench starts in its own process (`startSwitchyard`): port 0
 * on loopback, a fresh data folder in the system's temp folder (its embedded PostgreSQL too, unless
 * `DATABASE_URL` is set), model files from SWITCHYARD_MODELS_DIR (default `../shared/models`), no
 * downloads, warnings only. The environment still applies under these; `overrides` win over both.
 */
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { type Config, type ConfigInput, loadConfig, packageRoot } from "../src/config/config.js";

/** Where the benches read model files from. */
export const BENCH_MODELS_DIR = process.env.SWITCHYARD_MODELS_DIR ?? path.resolve(packageRoot, "../shared/models");

/**
 * The configuration above, with its data folder named `<prefix><random>` (the caller removes it
 * when it wants to: `config.dataDir`).
 * @throws ConfigError when the environment holds an invalid setting.
 */
export function benchConfig(prefix = "switchyard-bench-", overrides: Partial<ConfigInput> = {}): Config {
  return loadConfig(process.env, {
    port: 0,
    host: "127.0.0.1",
    dataDir: mkdtempSync(path.join(os.tmpdir(), prefix)),
    modelsDir: BENCH_MODELS_DIR,
    logLevel: "warn",
    allowModelDownload: false,
    ...overrides,
  });
}
