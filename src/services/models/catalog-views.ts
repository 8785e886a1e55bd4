/**
 * The control plane's model shapes (spec: "Catalog model", "Search item"; DESIGN §3 "Models and
 * deployments"): the one mapping from platform catalog entries and custom model rows to what REST
 * answers and GraphQL exposes (`schema/model.types.ts` names the same properties in camelCase).
 *
 * - Prices are USD per million tokens, as numbers (as `/v1/models`).
 * - `tpm_limit`, `rpm_limit`: the number as a string, or `"unlimited"`; `requests_per_hour`: the
 *   number as a string, or `"—"` when unlimited (DESIGN §3).
 * - Platform models: `ownership: "platform"`; `deploy_status` and `deployed_on_platform` say
 *   whether the platform serves them now (`available`/true unless `coming_soon`:
 *   `pending_deploy`/false).
 * - Custom models: `ownership: "custom"`, `provider: "custom"`, their own `deploy_status` and
 *   `status_reason`; `platform_status` is `available` once they are, else `coming_soon`, and
 *   `deployed_on_platform` is true once available. Prices, limits, capabilities and context follow
 *   the reference-model rule of `model-sources.ts`. The hub token only shows as
 *   `has_model_hub_token`.
 */
import type { CatalogModel, Modality, ModelLimits } from "../../config/catalog.js";
import type { ArtifactType, CustomModelEntity } from "../../entities/custom-model.entity.js";
import type { DeployStatus } from "../../entities/deployment.entity.js";
import { type ModelCapabilitiesDto, capabilitiesDto, pricingDto } from "./model-catalog.service.js";
import { type PlatformModels, customCatalogModel, localFileName } from "./model-sources.js";

export type PlatformStatus = CatalogModel["platformStatus"];

/** spec: Catalog model, plus the custom model's own fields (null for platform models). */
export interface CatalogModelDto {
  id: string;
  display_name: string;
  provider: string;
  platform_status: PlatformStatus;
  modality: Modality;
  context_tokens: number;
  released: string;
  deprecated: string;
  input_per_million_usd: number;
  output_per_million_usd: number;
  cached_input_per_million_usd: number;
  tpm_limit: string;
  rpm_limit: string;
  requests_per_hour: string;
  deployed_on_platform: boolean;
  capabilities: ModelCapabilitiesDto;
  ownership: "platform" | "custom";
  deploy_status: DeployStatus;
  architecture: string;
  has_model_hub_token: boolean;
  status_reason: string | null;
  artifact_type: ArtifactType | null;
  base_model_id: string | null;
  hf_repo: string | null;
  hf_revision: string | null;
  notes: string | null;
  created_at: Date | null;
  updated_at: Date | null;
}

/** `GET /control/v1/models/catalog`. */
export interface CatalogModelList {
  models: CatalogModelDto[];
}

/** spec: Search item. */
export interface ModelSearchItemDto {
  id: string;
  display_name: string;
  provider: string;
  modality: Modality;
  context_tokens: number;
  released: string;
  input_per_million_usd: number;
  output_per_million_usd: number;
  cached_input_per_million_usd: number;
  tpm_limit: string;
  rpm_limit: string;
  requests_per_hour: string;
  catalog_status: PlatformStatus;
  deployed_on_platform: boolean;
  source: "catalog";
}

/** `GET /control/v1/models/search`. */
export interface ModelSearchResult {
  items: ModelSearchItemDto[];
}

/** The three limit strings of a model. */
function limitStrings(limits: ModelLimits): Pick<CatalogModelDto, "tpm_limit" | "rpm_limit" | "requests_per_hour"> {
  return {
    tpm_limit: limits.tokensPerMinute === null ? "unlimited" : String(limits.tokensPerMinute),
    rpm_limit: limits.requestsPerMinute === null ? "unlimited" : String(limits.requestsPerMinute),
    requests_per_hour: limits.requestsPerHour === null ? "—" : String(limits.requestsPerHour),
  };
}

function prices(m: CatalogModel) {
  const p = pricingDto(m);
  return {
    input_per_million_usd: p.input_per_million_usd,
    output_per_million_usd: p.output_per_million_usd,
    cached_input_per_million_usd: p.cached_input_per_million_usd,
  };
}

/** The catalog-model fields that come from the model itself, platform or custom alike. */
function modelFields(m: CatalogModel) {
  return {
    id: m.id,
    display_name: m.displayName,
    provider: m.provider,
    modality: m.modality,
    context_tokens: m.contextTokens,
    released: m.released,
    deprecated: m.deprecated,
    ...prices(m),
    ...limitStrings(m.limits),
    capabilities: capabilitiesDto(m),
  };
}

/**
 * A platform catalog entry as a catalog model. `unavailable` (issue 17): why this machine does not
 * serve it (its file is not downloaded): `deploy_status` `pending_deploy` with that `status_reason`.
 */
export function platformCatalogItem(m: CatalogModel, unavailable?: string): CatalogModelDto {
  const served = m.platformStatus !== "coming_soon" && unavailable === undefined;
  return {
    ...modelFields(m),
    platform_status: m.platformStatus,
    deployed_on_platform: served,
    ownership: "platform",
    deploy_status: served ? "available" : "pending_deploy",
    architecture: m.architecture,
    has_model_hub_token: false,
    status_reason: unavailable ?? null,
    artifact_type: null,
    base_model_id: null,
    hf_repo: null,
    hf_revision: null,
    notes: null,
    created_at: null,
    updated_at: null,
  };
}

/** A custom model row as a catalog model. */
export function customCatalogItem(row: CustomModelEntity, platform: PlatformModels): CatalogModelDto {
  // Before the reconciler chose the engine, the fields are shown as it would choose when the file
  // is present: a GGUF a platform model uses is priced as that model (`model-sources.ts`).
  const file = row.engine ? undefined : localFileName(row);
  const guess = file ? platform.usingFile(file, row.modality)?.engine : undefined;
  const m = customCatalogModel(row, platform, row.engine ?? guess ?? { type: "openai_compatible" });
  const available = row.deployStatus === "available";
  return {
    ...modelFields(m),
    platform_status: available ? "available" : "coming_soon",
    deployed_on_platform: available,
    ownership: "custom",
    deploy_status: row.deployStatus,
    architecture: row.architecture,
    has_model_hub_token: row.hfTokenSealed !== null,
    status_reason: row.statusReason,
    artifact_type: row.artifactType,
    base_model_id: row.baseModelId,
    hf_repo: row.hfRepo,
    hf_revision: row.hfRevision,
    notes: row.notes,
    created_at: row.createdAt,
    updated_at: row.updatedAt,
  };
}

/** A platform catalog entry as a search item (`unavailable`: as `platformCatalogItem`). */
export function searchItem(m: CatalogModel, unavailable?: string): ModelSearchItemDto {
  return {
    id: m.id,
    display_name: m.displayName,
    provider: m.provider,
    modality: m.modality,
    context_tokens: m.contextTokens,
    released: m.released,
    ...prices(m),
    ...limitStrings(m.limits),
    catalog_status: m.platformStatus,
    deployed_on_platform: m.platformStatus !== "coming_soon" && unavailable === undefined,
    source: "catalog",
  };
}
