/**
 * The model catalog as the data plane shows it to a team: `GET /v1/models` items (spec: Model)
 * and model lookup for create operations (unknown model → 404, wrong modality → 400). A team sees
 * the platform catalog plus its own models (issue 9): its custom models that are `available`, and
 * a model with an `available` deployment of the team runs on that deployment. Lookups are
 * synchronous, from memory (`TeamModelDirectory`, kept fresh through NOTIFY).
 */
import type { CatalogModel, Modality } from "../../config/catalog.js";
import { AppError, ErrorCode, echo } from "../../shared/errors.js";
import { microsToUsdNumber } from "../../shared/money.js";
import type { PlatformModels } from "./model-sources.js";
import type { TeamModelDirectory } from "./team-models.js";

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
  /** Answers `POST /v1/decisions` (DESIGN §3 Decisions: "or say so in capabilities"). */
  decisions: SupportedDto;
  /**
   * Structured outputs (issue 26, item 6): the `response_format` / `text.format` types this model
   * decodes under (the embedded engine enforces the README's JSON Schema subset; an upstream
   * engine passes them through).
   */
  structured_outputs: { supported: boolean; modes: Array<"json_object" | "json_schema"> };
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
  /**
   * Issue 17: `available` when this server serves the model, `pending_deploy` when its file is not
   * downloaded here (`status_reason` then says `not downloaded: run npm run models -- pull <id>`).
   */
  deploy_status: "available" | "pending_deploy";
  status_reason: string | null;
}

export const OWNED_BY = "switchyard";

/** The catalog a team sees: model list (spec: Model), lookup by id, the default model. */
export class ModelCatalogService {
  constructor(
    private readonly platform: PlatformModels,
    private readonly teams: TeamModelDirectory,
  ) {}

  /** Every platform catalog model (all statuses). */
  all(): CatalogModel[] {
    return this.platform.catalog.models;
  }

  /** The model `npm start` must serve and readiness waits for. */
  defaultModel(): CatalogModel {
    return this.platform.defaultModel();
  }

  /** Why platform model `m` is not served on this server (issue 17: not downloaded), or undefined. */
  unavailable(m: CatalogModel): string | undefined {
    return this.platform.unavailable(m);
  }

  /**
   * Models offered to `teamId` on the data plane: the platform's (not `coming_soon`), in catalog
   * order, then the team's custom models that resolve (available, or with an available deployment).
   */
  list(teamId: string): ModelDto[] {
    const view = this.teams.view(teamId);
    return [
      ...this.platform.catalog.models.filter((m) => m.platformStatus !== "coming_soon"),
      ...view.customIds.map((id) => view.models.get(id)!),
    ].map((m) => toModelDto(m, view.models.has(m.id) ? undefined : this.platform.unavailable(m)));
  }

  /**
   * One listed model (`GET /v1/models/{model_id}`, as OpenAI and Anthropic serve it).
   * @throws AppError 404 for a model that is not listed to the team.
   */
  get(teamId: string, id: string): ModelDto {
    const model = this.find(teamId, id);
    if (!model) throw AppError.notFound(`Model '${echo(id)}' not found`);
    const own = this.teams.view(teamId).models.has(id);
    return toModelDto(model, own ? undefined : this.platform.unavailable(model));
  }

  /**
   * What `id` runs as for the team, or undefined: the team's available deployment of it, else its
   * available custom model, else the platform model (not `coming_soon`). Synchronous, from memory.
   */
  find(teamId: string, id: string): CatalogModel | undefined {
    const own = this.teams.view(teamId).models.get(id);
    if (own) return own;
    const model = this.platform.get(id);
    return model && model.platformStatus !== "coming_soon" ? model : undefined;
  }

  /**
   * The model a create operation of `teamId` names (see `find`). Its `id` stays the name the
   * caller used, whatever runtime serves it.
   * @throws AppError 404 for a model the team cannot use (unknown, not yet available, another
   *   team's custom model, or a platform model whose file is not downloaded on this server: the
   *   message then says `not downloaded: run npm run models -- pull <id>`, issue 17); 400 when it
   *   cannot serve `modality` (e.g. an embedding model on chat completions; for `decisions`: a
   *   model whose capabilities do not list decisions).
   */
  resolve(teamId: string, id: string, modality: Modality): CatalogModel {
    const model = this.find(teamId, id);
    if (!model) {
      throw new AppError(ErrorCode.NotFound, `Model '${echo(id)}' not found`, {
        field: "model",
        code: "model_not_found",
      });
    }
    const missing = this.teams.view(teamId).models.has(id) ? undefined : this.platform.unavailable(model);
    if (missing) {
      throw new AppError(ErrorCode.NotFound, `Model '${echo(id)}' is ${missing}`, {
        field: "model",
        code: "model_not_downloaded",
      });
    }
    // Decisions are served by models that say so, whatever their modality (DESIGN §3 Decisions).
    if (modality === "decisions" ? !model.capabilities.decisions : model.modality !== modality) {
      throw AppError.invalid(`Model '${echo(id)}' is a ${model.modality} model and cannot serve this endpoint`, [
        { field: "model", message: `expected a ${modality} model` },
      ]);
    }
    return model;
  }
}

function toModelDto(m: CatalogModel, unavailable?: string): ModelDto {
  return {
    id: m.id,
    object: "model",
    created: m.created,
    owned_by: OWNED_BY,
    display_name: m.displayName,
    modality: m.modality,
    capabilities: capabilitiesDto(m),
    context_tokens: m.contextTokens,
    provider: m.provider,
    pricing: pricingDto(m),
    released: m.released,
    deploy_status: unavailable === undefined ? "available" : "pending_deploy",
    status_reason: unavailable ?? null,
  };
}

/** spec: Model `capabilities` (also the catalog model's). */
export function capabilitiesDto(m: CatalogModel): ModelCapabilitiesDto {
  return {
    image_input: { supported: m.capabilities.imageInput },
    pdf_input: { supported: m.capabilities.pdfInput },
    thinking: {
      supported: m.capabilities.thinking,
      types: { enabled: { supported: m.capabilities.thinking }, adaptive: { supported: false } },
    },
    // True exactly where tools work (issue 26, item 6): every text model of the embedded engine
    // (grammar-constrained calls, item 2; a custom GGUF or an entry that leaves the flag out too),
    // and an upstream's where its catalog entry says so (`assertToolsServed` refuses the others).
    tools: {
      supported:
        m.engine.type === "llama_cpp"
          ? m.modality === "text_generation"
          : m.modality === "text_generation" && m.capabilities.tools,
    },
    dimensions: m.capabilities.dimensions,
    decisions: { supported: m.capabilities.decisions },
    structured_outputs:
      m.modality === "text_generation"
        ? { supported: true, modes: ["json_object", "json_schema"] }
        : { supported: false, modes: [] },
  };
}

/** Prices as USD per million tokens (numbers, exact: micro-USD per token). */
export function pricingDto(m: CatalogModel): ModelPricingDto {
  return {
    input_per_million_usd: microsToUsdNumber(m.prices.inputPerMillionMicros),
    output_per_million_usd: microsToUsdNumber(m.prices.outputPerMillionMicros),
    cached_input_per_million_usd: microsToUsdNumber(m.prices.cachedInputPerMillionMicros),
  };
}
