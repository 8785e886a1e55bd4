/**
 * Test helpers for custom models and deployments (issue 9): REST calls, waiting for the
 * reconciler, a models folder of a test's own (the shared GGUF plus a file that is no model), and
 * a hold on the next engine context at the node-llama-cpp boundary (no hook in Switchyard's code),
 * so a test sees a deployment `deploying` for as long as it needs.
 */
import { mkdtempSync, symlinkSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import type { CatalogModel } from "../../src/config/catalog.js";
import { LlamaCppEngine } from "../../src/inference/engines/llama-cpp/llama-cpp.engine.js";
import type { SlotPoolStats } from "../../src/inference/slot-pool.js";
import { MODELS_DIR, type TestServer, eventually, http } from "./harness.js";

/** The GGUF every test model is (the shared TinyStories 260K file). */
export const SHARED_GGUF = "stories260K.gguf";
/** A file in `modelsDirWithGarbage()` that is no GGUF at all. */
export const GARBAGE_GGUF = "garbage.gguf";

/** A models folder holding the shared GGUF (linked) and `garbage.gguf` (text, not a model). */
export function modelsDirWithGarbage(): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), "switchyard-models-"));
  symlinkSync(path.join(MODELS_DIR, SHARED_GGUF), path.join(dir, SHARED_GGUF));
  writeFileSync(path.join(dir, GARBAGE_GGUF), "this is not a model file\n".repeat(64));
  return dir;
}

/** `POST /control/v1/deployments`; throws unless 201. @returns the deployment. */
export async function createDeployment(server: TestServer, token: string, body: Record<string, unknown>): Promise<any> {
  const res = await http(server.url, "POST", "/control/v1/deployments", { token, body });
  if (res.status !== 201) throw new Error(`deployment failed: ${res.status} ${res.text}`);
  return res.body;
}

/** `POST /control/v1/models/custom`; throws unless 201. @returns the catalog model. */
export async function createCustomModel(
  server: TestServer,
  token: string,
  body: Record<string, unknown>,
): Promise<any> {
  const res = await http(server.url, "POST", "/control/v1/models/custom", { token, body });
  if (res.status !== 201) throw new Error(`custom model failed: ${res.status} ${res.text}`);
  return res.body;
}

/** `POST /control/v1/models/request-deployment`; throws unless `{ok: true}`. */
export async function requestDeployment(server: TestServer, token: string, modelId: string): Promise<void> {
  const res = await http(server.url, "POST", "/control/v1/models/request-deployment", {
    token,
    body: { model_id: modelId },
  });
  if (res.status !== 200 || res.body.ok !== true) throw new Error(`request failed: ${res.status} ${res.text}`);
}

/** The team's deployment `id` as `GET /control/v1/deployments` lists it (undefined when gone). */
export async function listedDeployment(server: TestServer, token: string, id: string): Promise<any> {
  const res = await http(server.url, "GET", "/control/v1/deployments", { token });
  return (res.body.items as any[]).find((d) => d.id === id);
}

/** The team's custom model `modelId` as the catalog lists it. */
export async function catalogModel(server: TestServer, token: string, modelId: string): Promise<any> {
  const res = await http(server.url, "GET", "/control/v1/models/catalog", { token });
  return (res.body.models as any[]).find((m) => m.id === modelId && m.ownership === "custom");
}

/** Waits (up to 45 s) until the deployment's status is one of `statuses`; @returns it as listed. */
export async function deploymentSettles(
  server: TestServer,
  token: string,
  id: string,
  statuses: string[] = ["available", "failed", "rejected"],
): Promise<any> {
  let found: any;
  await eventually(async () => {
    found = await listedDeployment(server, token, id);
    return statuses.includes(found?.status);
  }, 45_000);
  return found;
}

/** Waits (up to 45 s) until the custom model's deploy_status is one of `statuses`; @returns it. */
export async function customModelSettles(
  server: TestServer,
  token: string,
  modelId: string,
  statuses: string[] = ["available", "failed", "rejected"],
): Promise<any> {
  let found: any;
  await eventually(async () => {
    found = await catalogModel(server, token, modelId);
    return statuses.includes(found?.deploy_status);
  }, 45_000);
  return found;
}

type CreateContext = (...args: unknown[]) => Promise<unknown>;

/**
 * Holds the next engine context the embedded engine creates (a new runtime: a deployment or a
 * custom model being brought up) until `release()`; then it is created for real.
 */
export async function holdNextContext(): Promise<{ started: Promise<void>; release: () => void }> {
  const lib = await import("node-llama-cpp");
  const proto = lib.LlamaModel.prototype as unknown as { createContext: CreateContext };
  const original = proto.createContext;
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  let markStarted!: () => void;
  const started = new Promise<void>((r) => (markStarted = r));
  proto.createContext = async function heldOnce(this: unknown, ...args: unknown[]) {
    proto.createContext = original;
    markStarted();
    await gate;
    return original.apply(this, args);
  };
  return { started, release };
}

/** The slot pool of a runtime (`runtimeKey` as `CatalogModel.runtime.key`) in `server`'s embedded engine. */
export async function runtimeSlots(
  server: TestServer,
  model: string,
  runtimeKey?: string,
): Promise<SlotPoolStats | undefined> {
  const platform = server.app.catalog.all().find((m) => m.id === model)!;
  const engine = server.app.engines.engineFor(platform);
  if (!(engine instanceof LlamaCppEngine)) throw new Error(`${model} is not served by the embedded engine`);
  const probe: CatalogModel = runtimeKey ? { ...platform, runtime: { key: runtimeKey, slots: 1 } } : platform;
  return engine.slots(probe);
}
