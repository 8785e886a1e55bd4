/**
 * The rules that turn a team's custom model into what it runs as (`services/models/model-sources.ts`):
 * the GGUF file name looked up, the engine chosen, the reference model for prices and limits, the
 * runtimes' slots; and the hub token's sealing (`secret-box.ts`).
 */
import path from "node:path";
import { loadCatalog } from "../../src/config/catalog.js";
import { packageRoot } from "../../src/config/config.js";
import {
  DEFAULT_CONTEXT_TOKENS,
  PlatformModels,
  customCatalogModel,
  customEngine,
  deploymentSlots,
  localFileName,
} from "../../src/services/models/model-sources.js";
import { SecretBox } from "../../src/services/models/secret-box.js";

const platform = new PlatformModels(loadCatalog(path.join(packageRoot, "src/config/catalog.json")));

function row(overrides: Partial<Parameters<typeof customEngine>[0]> = {}): Parameters<typeof customEngine>[0] {
  return {
    id: "0190aaaa-0000-7000-8000-000000000001",
    modelId: "acme/my-model",
    displayName: null,
    architecture: "llama",
    modality: "text_generation",
    artifactType: "full",
    baseModelId: null,
    hfRepo: null,
    createdAt: new Date("2025-01-01T00:00:00Z"),
    ...overrides,
  };
}

describe("the GGUF file a custom model is looked up as", () => {
  test("when hf_repo ends in .gguf, then its last segment; else the last segment of model_id plus .gguf", () => {
    expect(localFileName(row({ hfRepo: "ggml-org/models/tinyllamas/stories260K.gguf" }))).toBe("stories260K.gguf");
    expect(localFileName(row({ hfRepo: "acme/my-model" }))).toBe("my-model.gguf");
    expect(localFileName(row())).toBe("my-model.gguf");
  });

  test("when the name could leave the models folder or is hidden, or the model is a LoRA, then none", () => {
    expect(localFileName(row({ modelId: "..", hfRepo: null }))).toBeUndefined();
    expect(localFileName(row({ hfRepo: "a/.hidden.gguf" }))).toBeUndefined();
    expect(localFileName(row({ modelId: "x/..\\evil" }))).toBeUndefined();
    expect(localFileName(row({ artifactType: "lora", hfRepo: "a/b.gguf" }))).toBeUndefined();
  });
});

describe("the engine and the reference model", () => {
  test("when the file is found, then the embedded engine with the base model's settings", () => {
    const engine = customEngine(row({ baseModelId: "tinystories-260k" }), platform, (f) => f === "my-model.gguf");
    expect(engine).toEqual({
      type: "llama_cpp",
      file: "my-model.gguf",
      context_size: 512,
      chat_template: "none",
      eog_token_ids: [1],
    });
    expect(customEngine(row(), platform, () => true)).toMatchObject({
      context_size: DEFAULT_CONTEXT_TOKENS,
      chat_template: "auto",
      eog_token_ids: [],
    });
  });

  test("when the file is not found, then upstream servers by model_id", () => {
    expect(customEngine(row(), platform, () => false)).toEqual({
      type: "openai_compatible",
      upstream_model: "acme/my-model",
    });
  });

  test("when base_model_id names a platform model of its modality, then its prices, limits and capabilities; else the default's prices and none", () => {
    const base = platform.get("tinystories-260k-embed")!;
    const withBase = customCatalogModel(row({ modality: "text_embedding", baseModelId: base.id }), platform, {
      type: "openai_compatible",
    });
    expect(withBase.prices).toEqual(base.prices);
    expect(withBase.capabilities.dimensions).toBe(64);
    // A base of another modality is no base.
    const mismatched = customCatalogModel(row({ baseModelId: base.id }), platform, { type: "openai_compatible" });
    expect(mismatched.prices).toEqual(platform.defaultModel().prices);
    expect(mismatched.capabilities.dimensions).toBeNull();
    expect(mismatched.contextTokens).toBe(DEFAULT_CONTEXT_TOKENS);
    expect(mismatched).toMatchObject({ id: "acme/my-model", displayName: "acme/my-model", provider: "custom" });
  });

  test("when a custom model runs a platform model's weights (its GGUF, or its upstream model id), then it is that model for prices, limits and rate-limit windows, whatever base_model_id says", () => {
    const catalog = loadCatalog(path.join(packageRoot, "src/config/catalog.json"));
    const pricey = {
      ...catalog.models[0],
      id: "pricey",
      prices: { ...catalog.models[0].prices, inputPerMillionMicros: 5_000_000n },
      engine: { type: "openai_compatible" as const, upstream_model: "org/big-model" },
    };
    const withPricey = new PlatformModels({ ...catalog, models: [...catalog.models, pricey] });
    const alias = customCatalogModel(row({ modelId: "org/big-model", baseModelId: "tinystories-260k" }), withPricey, {
      type: "openai_compatible",
      upstream_model: "org/big-model",
    });
    expect(alias.prices).toBe(pricey.prices);
    expect(alias.limitKey).toBe("pricey");
    // The shared GGUF of the platform chat model: priced as it, counted in its windows.
    const local = customCatalogModel(
      row({ baseModelId: null }),
      withPricey,
      customEngine(row({ hfRepo: "x/stories260K.gguf" }), withPricey, () => true),
    );
    expect(local.limitKey).toBe("tinystories-260k");
    expect(local.contextTokens).toBe(512);
    // Other weights without a base: the default model's prices and windows.
    const other = customCatalogModel(row(), withPricey, { type: "openai_compatible", upstream_model: "acme/other" });
    expect(other.limitKey).toBe(withPricey.defaultModel().id);
    expect(other.contextTokens).toBe(DEFAULT_CONTEXT_TOKENS);
  });

  test("when a deployment asks for 0 or n replicas, then 1 or n slots", () => {
    expect(deploymentSlots(0)).toBe(1);
    expect(deploymentSlots(3)).toBe(3);
  });
});

describe("SecretBox", () => {
  const box = new SecretBox("test-secret-test-secret-test-secret-0123", "model-hub-token");

  test("when sealed, then it opens for its context only, and not with another purpose's key", () => {
    const sealed = box.seal("hf_token", "row-1");
    expect(sealed.includes(Buffer.from("hf_token"))).toBe(false);
    expect(box.open(sealed, "row-1")).toBe("hf_token");
    expect(() => box.open(sealed, "row-2")).toThrow();
    expect(() => new SecretBox("test-secret-test-secret-test-secret-0123", "other").open(sealed, "row-1")).toThrow();
  });

  test("when a sealed value is altered, then it does not open; sealing twice gives different values", () => {
    const sealed = box.seal("hf_token", "row-1");
    const altered = Buffer.from(sealed);
    altered[altered.length - 1] ^= 1;
    expect(() => box.open(altered, "row-1")).toThrow();
    expect(box.seal("hf_token", "row-1").equals(sealed)).toBe(false);
  });
});
