/**
 * Test catalogs: the shipped `src/config/catalog.json` with one model's prices replaced, written to
 * a temporary file for `startTestServer({ catalogPath })`. The shipped prices are tiny (a short
 * request costs 0 or 1 micro-USD), too small for price arithmetic to show in a test.
 */
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { packageRoot } from "../../src/config/config.js";

/** Catalog prices in USD per million tokens (= micro-USD per token), as decimal strings. */
export interface TestPrices {
  input: string;
  cachedInput: string;
  output: string;
}

/** Writes the shipped catalog with `modelId`'s pricing set to `prices`; returns the file's path. */
export function writeTestCatalog(modelId: string, prices: TestPrices): string {
  return writePatchedCatalog({
    [modelId]: {
      pricing: {
        input_per_million_usd: prices.input,
        cached_input_per_million_usd: prices.cachedInput,
        output_per_million_usd: prices.output,
      },
    },
  });
}

/**
 * Writes the shipped catalog with fields of some models replaced (e.g. `{ [CHAT_MODEL]: { rpm_limit: 30 } }`);
 * returns the file's path.
 */
export function writePatchedCatalog(patches: Record<string, Record<string, unknown>>): string {
  const catalog = JSON.parse(readFileSync(path.join(packageRoot, "src/config/catalog.json"), "utf8")) as {
    models: Array<Record<string, unknown> & { id: string }>;
  };
  for (const [modelId, patch] of Object.entries(patches)) {
    const model = catalog.models.find((m) => m.id === modelId);
    if (!model) throw new Error(`no model ${modelId} in the shipped catalog`);
    Object.assign(model, patch);
  }
  const file = path.join(mkdtempSync(path.join(os.tmpdir(), "switchyard-catalog-")), "catalog.json");
  writeFileSync(file, JSON.stringify(catalog, null, 2));
  return file;
}

/** A catalog as JSON (the fields tests edit). */
export interface CatalogJson {
  default_model: string;
  models: Array<Record<string, unknown> & { id: string }>;
}

/** Writes the shipped catalog as `edit` changes it; returns the file's path. */
export function writeEditedCatalog(edit: (catalog: CatalogJson) => void): string {
  const catalog = JSON.parse(readFileSync(path.join(packageRoot, "src/config/catalog.json"), "utf8")) as CatalogJson;
  edit(catalog);
  const file = path.join(mkdtempSync(path.join(os.tmpdir(), "switchyard-catalog-")), "catalog.json");
  writeFileSync(file, JSON.stringify(catalog, null, 2));
  return file;
}

/**
 * Adds `id`, a copy of the chat test model served by an upstream engine (`openai_compatible`,
 * upstream model `tinystories-260k`), to `catalog`; returns the chat test model's entry.
 */
export function addUpstreamChat(catalog: CatalogJson, id: string): CatalogJson["models"][number] {
  const chat = catalog.models.find((m) => m.id === "tinystories-260k")!;
  catalog.models.push({
    ...chat,
    id,
    display_name: id,
    engine: { type: "openai_compatible", upstream_model: "tinystories-260k" },
  });
  return chat;
}
