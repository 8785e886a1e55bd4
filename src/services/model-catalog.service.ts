/**
 * The model catalog as the API shows it: `GET /v1/models` items (spec: Model) and model lookup for
 * create operations (unknown model → 404, wrong modality → 400).
 */
import type { Catalog, CatalogModel, Modality } from "../config/catalog.js";
import { AppError, ErrorCode } from "../shared/errors.js";
import { microsToUsdNumber } from "../shared/money.js";

export interface SupportedDto {
  supported: boolean;
}

export interface ModelCapabilitiesDto {
  image_input: SupportedDto;
  pdf_input: SupportedDto;
  thinking: { supported: boolean; types: { enabled: SupportedDto; adaptive: SupportedDto } };
  tools: SupportedDto;
  /** Embedding width for embedding models, else null. */
  dimensions: number | null;
}

export interface ModelPricingDto {
  input_per_million_usd: number;
  output_per_million_usd: number;
  cached_input_per_million_usd: number;
}

/** spec: Model (data plane list item); `owned_by` is always `switchyard` (DESIGN §3). */
export interface ModelDto {
  id: string;
  object: "model";
  created: number;
  owned_by: string;
  display_name: string;
  modality: Modality;
  capabilities: ModelCapabilitiesDto;
  context_tokens: number;
  provider: string;
  pricing: ModelPricingDto;
  released: string;
}

export const OWNED_BY = "switchyard";

/** The loaded catalog: model list (spec: Model), lookup by id, the default model. */
export class ModelCatalogService {
  private readonly byId: Map<string, CatalogModel>;

  constructor(private readonly catalog: Catalog) {
    this.byId = new Map(catalog.models.map((m) => [m.id, m]));
  }

  /** Every catalog model (all statuses). */
  all(): CatalogModel[] {
    return this.catalog.models;
  }

  /** The model `npm start` must serve and readiness waits for. */
  defaultModel(): CatalogModel {
    return this.byId.get(this.catalog.defaultModel)!;
  }

  /** Models offered on the data plane (not `coming_soon`), in catalog order. */
  list(): ModelDto[] {
    return this.catalog.models.filter((m) => m.platformStatus !== "coming_soon").map(toModelDto);
  }

  /**
   * One listed model (`GET /v1/models/{model_id}`, as OpenAI and Anthropic serve it).
   * @throws AppError 404 for a model that is not listed.
   */
  get(id: string): ModelDto {
    const model = this.byId.get(id);
    if (!model || model.platformStatus === "coming_soon") throw AppError.notFound(`Model '${id}' not found`);
    return toModelDto(model);
  }

  /**
   * The model a create operation names.
   * @throws AppError 404 for an unknown (or not yet available) model; 400 when it cannot serve
   *   `modality` (e.g. an embedding model on chat completions).
   */
  resolve(id: string, modality: Modality): CatalogModel {
    const model = this.byId.get(id);
    if (!model || model.platformStatus === "coming_soon") {
      throw new AppError(ErrorCode.NotFound, `Model '${id}' not found`, { field: "model", code: "model_not_found" });
    }
    if (model.modality !== modality) {
      throw AppError.invalid(`Model '${id}' is a ${model.modality} model and cannot serve this endpoint`, [
        { field: "model", message: `expected a ${modality} model` },
      ]);
    }
    return model;
  }
}

function toModelDto(m: CatalogModel): ModelDto {
  return {
    id: m.id,
    object: "model",
    created: m.created,
    owned_by: OWNED_BY,
    display_name: m.displayName,
    modality: m.modality,
    capabilities: {
      image_input: { supported: m.capabilities.imageInput },
      pdf_input: { supported: m.capabilities.pdfInput },
      thinking: {
        supported: m.capabilities.thinking,
        types: { enabled: { supported: m.capabilities.thinking }, adaptive: { supported: false } },
      },
      tools: { supported: m.capabilities.tools },
      dimensions: m.capabilities.dimensions,
    },
    context_tokens: m.contextTokens,
    provider: m.provider,
    pricing: {
      input_per_million_usd: microsToUsdNumber(m.prices.inputPerMillionMicros),
      output_per_million_usd: microsToUsdNumber(m.prices.outputPerMillionMicros),
      cached_input_per_million_usd: microsToUsdNumber(m.prices.cachedInputPerMillionMicros),
    },
    released: m.released,
  };
}
