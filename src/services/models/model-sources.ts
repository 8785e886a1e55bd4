/**
 * What a team's custom model or deployment runs as (issue 9): the `CatalogModel` the engines and
 * the metering see. The rules, in one place (README "Models and deployments"):
 *
 * - **Reference model.** A custom model that runs the same weights as a platform model of its
 *   modality — the same GGUF file in the models directory, or the same upstream model id — is
 *   that model as far as money and limits go: it takes its prices, per-team limits, capabilities,
 *   context and engine settings, whatever `base_model_id` says (issue 9 review, finding 3: a team
 *   cannot rename a platform model to pay another's price). Otherwise a custom model whose
 *   `base_model_id` names a platform model of the same modality takes that model's; otherwise
 *   prices and limits come from the catalog's default model of its modality (the default model
 *   for text generation, the first embedding model for embeddings), it has no capabilities, and a
 *   context of `DEFAULT_CONTEXT_TOKENS`.
 * - **Rate limits** count in the reference model's windows (`CatalogModel.limitKey`), so custom
 *   models named differently over the same model do not multiply a team's limits.
 * - **Engine.** A full (not LoRA) custom model runs on the embedded engine when its GGUF file is
 *   in the models directory (`SWITCHYARD_MODELS_DIR`, else `<data dir>/models`; never downloaded):
 *   the file is the last path segment of `hf_repo` when that ends in `.gguf`
 *   (`ggml-org/models/tinyllamas/stories260K.gguf` → `stories260K.gguf`), else the last path
 *   segment of `model_id` plus `.gguf` (`acme/my-model` → `my-model.gguf`). Anything else (a LoRA
 *   adapter, no file) is served by upstream OpenAI-compatible servers as `upstream_model` =
 *   `model_id`. The reconciler decides when it brings the model up and keeps the choice on the
 *   row, so every process routes it alike.
 * - **Runtime.** A requested custom model gets a runtime of its own in the engine
 *   (`custom:<row id>`, as many slots as a platform model); a deployment gets one per deployment
 *   (`deployment:<id>`) with `max(1, min_replicas)` slots: `min_replicas` 0 still loads one
 *   sequence (the embedded engine does not scale to zero), and `max_replicas` is recorded only.
 * - The model keeps the id the caller names: activity, usage and answers say `model_id`.
 */
import type { Catalog, CatalogModel, EngineSpec, Modality } from "../../config/catalog.js";
import type { CustomModelEntity } from "../../entities/custom-model.entity.js";
import type { DeploymentEntity } from "../../entities/deployment.entity.js";

/** Context of a custom model without a platform base model, tokens. */
export const DEFAULT_CONTEXT_TOKENS = 2048;

/** A file name the models directory may hold: no path, no leading dot. */
const SAFE_FILE = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,250}\.gguf$/i;

/** What a custom model row must say for these rules. */
export type CustomModelFields = Pick<
  CustomModelEntity,
  | "id"
  | "modelId"
  | "displayName"
  | "architecture"
  | "modality"
  | "artifactType"
  | "baseModelId"
  | "hfRepo"
  | "createdAt"
>;

/**
 * Whether a platform model can be served on this machine (issue 17): `missing` says why not
 * (`not downloaded: run npm run models -- pull <id>`), undefined when it can.
 */
export interface ModelAvailability {
  missing(model: CatalogModel): string | undefined;
}

/** The platform catalog as the rules read it. */
export class PlatformModels {
  private readonly byId: Map<string, CatalogModel>;

  constructor(
    readonly catalog: Catalog,
    private readonly availability?: ModelAvailability,
  ) {
    this.byId = new Map(catalog.models.map((m) => [m.id, m]));
  }

  /**
   * Why platform model `m` is not served on this machine (issue 17: its file is not downloaded),
   * or undefined when it is (or is `coming_soon`, which says so itself).
   */
  unavailable(m: CatalogModel): string | undefined {
    return m.platformStatus === "coming_soon" ? undefined : this.availability?.missing(m);
  }

  /** The platform model `id`, any status; undefined when the catalog has none. */
  get(id: string): CatalogModel | undefined {
    return this.byId.get(id);
  }

  /** The catalog's default model. */
  defaultModel(): CatalogModel {
    return this.byId.get(this.catalog.defaultModel)!;
  }

  /** Where prices and limits of a custom model without a base come from (see the module header). */
  defaultFor(modality: Modality): CatalogModel {
    if (modality === "text_generation") return this.defaultModel();
    return this.catalog.models.find((m) => m.modality === modality) ?? this.defaultModel();
  }

  /** The platform base model of a custom model: `base_model_id` when it names one of the same modality. */
  baseOf(row: Pick<CustomModelFields, "baseModelId" | "modality">): CatalogModel | undefined {
    const base = row.baseModelId ? this.byId.get(row.baseModelId) : undefined;
    return base && base.modality === row.modality ? base : undefined;
  }

  /**
   * The platform model of `modality` that runs what `engine` runs: the same GGUF file on the
   * embedded engine, or the same upstream model id (`upstream_model`, else `modelId`) upstream;
   * undefined when none does. The first in catalog order when several do.
   */
  runningSame(engine: EngineSpec, modality: Modality, modelId: string): CatalogModel | undefined {
    if (engine.type === "llama_cpp") {
      return this.catalog.models.find(
        (m) => m.modality === modality && m.engine.type === "llama_cpp" && m.engine.file === engine.file,
      );
    }
    const upstream = engine.upstream_model ?? modelId;
    return this.catalog.models.find(
      (m) =>
        m.modality === modality &&
        m.engine.type === "openai_compatible" &&
        (m.engine.upstream_model ?? m.id) === upstream,
    );
  }

  /** What a custom model is priced and limited as (see the module header); undefined: the default. */
  referenceOf(row: CustomModelFields, engine: EngineSpec): CatalogModel | undefined {
    return this.runningSame(engine, row.modality, row.modelId) ?? this.baseOf(row);
  }

  /** A platform model that uses the GGUF file `file` for `modality`, if one does. */
  usingFile(file: string, modality: Modality): CatalogModel | undefined {
    return this.runningSame(
      { type: "llama_cpp", file, context_size: 0, chat_template: "auto", eog_token_ids: [] },
      modality,
      "",
    );
  }
}

/**
 * The GGUF file name the rules look for (see the module header); undefined when the name would
 * not be a plain file name, or for a LoRA adapter.
 */
export function localFileName(row: Pick<CustomModelFields, "modelId" | "hfRepo" | "artifactType">): string | undefined {
  if (row.artifactType === "lora") return undefined;
  const fromRepo = row.hfRepo?.split("/").at(-1);
  const name = fromRepo && /\.gguf$/i.test(fromRepo) ? fromRepo : `${row.modelId.split("/").at(-1)}.gguf`;
  return SAFE_FILE.test(name) ? name : undefined;
}

/**
 * The engine a custom model runs on: the embedded engine when `hasLocalFile` finds its GGUF, else
 * upstream servers (see the module header).
 */
export function customEngine(
  row: CustomModelFields,
  platform: PlatformModels,
  hasLocalFile: (file: string) => boolean,
): EngineSpec {
  const file = localFileName(row);
  if (file && hasLocalFile(file)) {
    const base = platform.usingFile(file, row.modality) ?? platform.baseOf(row);
    const baseEngine = base?.engine.type === "llama_cpp" ? base.engine : undefined;
    return {
      type: "llama_cpp",
      file,
      context_size: baseEngine?.context_size ?? base?.contextTokens ?? DEFAULT_CONTEXT_TOKENS,
      chat_template: baseEngine?.chat_template ?? "auto",
      eog_token_ids: baseEngine?.eog_token_ids ?? [],
    };
  }
  return { type: "openai_compatible", upstream_model: row.modelId };
}

/** A custom model as a catalog model (prices, limits, capabilities by the reference-model rule). */
export function customCatalogModel(
  row: CustomModelFields,
  platform: PlatformModels,
  engine: EngineSpec,
  runtime?: CatalogModel["runtime"],
): CatalogModel {
  const base = platform.referenceOf(row, engine);
  const reference = base ?? platform.defaultFor(row.modality);
  return {
    id: row.modelId,
    displayName: row.displayName ?? row.modelId,
    provider: CUSTOM_PROVIDER,
    modality: row.modality,
    contextTokens: base?.contextTokens ?? DEFAULT_CONTEXT_TOKENS,
    released: "",
    architecture: row.architecture,
    platformStatus: "available",
    deprecated: "",
    prices: reference.prices,
    capabilities: base
      ? base.capabilities
      : { tools: false, imageInput: false, pdfInput: false, thinking: false, dimensions: null, decisions: false },
    decisionTemperature: base?.decisionTemperature ?? 1,
    limits: reference.limits,
    limitKey: reference.id,
    engine,
    created: Math.floor(row.createdAt.getTime() / 1000),
    ...(runtime ? { runtime } : {}),
  };
}

/**
 * The model whose price versions a custom model is charged by (`CatalogModel.limitKey`, which
 * `PriceBook.pricesAt` reads): its reference model, else the default model of its modality. Its
 * engine is the reconciler's choice once made, else the choice it would make when the file is
 * present (as `customCatalogItem` shows it). Read by the billing summary to show the pricing its
 * requests paid (issue 10, item 3).
 */
export function customPriceModelId(
  row: CustomModelFields & { engine?: EngineSpec | null },
  platform: PlatformModels,
): string {
  const file = row.engine ? undefined : localFileName(row);
  const guess = file ? platform.usingFile(file, row.modality)?.engine : undefined;
  const engine = row.engine ?? guess ?? { type: "openai_compatible" };
  return (platform.referenceOf(row, engine) ?? platform.defaultFor(row.modality)).id;
}

/** `provider` of every custom model. */
export const CUSTOM_PROVIDER = "custom";

/** The runtime of a requested custom model (see the module header). */
export function customRuntime(row: Pick<CustomModelFields, "id">, slots: number): CatalogModel["runtime"] {
  return { key: `custom:${row.id}`, slots };
}

/** Slots of a deployment: `max(1, min_replicas)` (see the module header). */
export function deploymentSlots(minReplicas: number): number {
  return Math.max(1, minReplicas);
}

/** The runtime of a deployment. */
export function deploymentRuntime(deployment: Pick<DeploymentEntity, "id" | "minReplicas">): CatalogModel["runtime"] {
  return { key: `deployment:${deployment.id}`, slots: deploymentSlots(deployment.minReplicas) };
}
