/**
 * GraphQL types of the model list (spec: Model), the control-plane catalog (spec: Catalog model,
 * Search item) and custom model inputs. The catalog types expose the service's DTOs
 * (`services/models/catalog-views.ts`, the one mapping) under camelCase names.
 */
import { Field, Float, InputType, Int, ObjectType } from "type-graphql";
import type { Modality } from "../config/catalog.js";
import type { ArtifactType } from "../entities/custom-model.entity.js";
import type { DeployStatus } from "../entities/deployment.entity.js";
import type {
  CatalogModelDto,
  CatalogModelList,
  ModelSearchItemDto,
  ModelSearchResult,
  PlatformStatus,
} from "../services/models/catalog-views.js";
import type {
  CreateCustomModelInput,
  OkResult,
  RequestDeploymentInput,
} from "../services/models/custom-models.service.js";
import { absent } from "./mapped-arg.js";
import type {
  ModelCapabilitiesDto,
  ModelDto,
  ModelPricingDto,
  SupportedDto,
} from "../services/models/model-catalog.service.js";

@ObjectType("Supported")
export class SupportedType implements SupportedDto {
  @Field() supported!: boolean;
}

@ObjectType("ThinkingTypes")
export class ThinkingTypesType {
  @Field(() => SupportedType) enabled!: SupportedDto;
  @Field(() => SupportedType) adaptive!: SupportedDto;
}

@ObjectType("ThinkingCapability")
export class ThinkingType {
  @Field() supported!: boolean;
  @Field(() => ThinkingTypesType) types!: ThinkingTypesType;
}

@ObjectType("StructuredOutputs")
export class StructuredOutputsType {
  @Field() supported!: boolean;
  @Field(() => [String], { description: "response_format / text.format types: json_object, json_schema." })
  modes!: Array<"json_object" | "json_schema">;
}

@ObjectType("ModelCapabilities")
export class ModelCapabilitiesType implements ModelCapabilitiesDto {
  @Field(() => SupportedType, { name: "imageInput" }) image_input!: SupportedDto;
  @Field(() => SupportedType, { name: "pdfInput" }) pdf_input!: SupportedDto;
  @Field(() => ThinkingType) thinking!: ThinkingType;
  @Field(() => SupportedType) tools!: SupportedDto;
  @Field(() => Int, { nullable: true, description: "Embedding width (embedding models)." }) dimensions!: number | null;
  @Field(() => SupportedType, { description: "Answers decisions (POST /v1/decisions)." }) decisions!: SupportedDto;
  @Field(() => StructuredOutputsType, {
    name: "structuredOutputs",
    description: "Structured outputs it decodes under.",
  })
  structured_outputs!: StructuredOutputsType;
}

@ObjectType("ModelPricing", { description: "USD per million tokens." })
export class ModelPricingType implements ModelPricingDto {
  @Field(() => Float, { name: "inputPerMillionUsd" }) input_per_million_usd!: number;
  @Field(() => Float, { name: "outputPerMillionUsd" }) output_per_million_usd!: number;
  @Field(() => Float, { name: "cachedInputPerMillionUsd" }) cached_input_per_million_usd!: number;
}

@ObjectType("Model")
export class ModelType implements ModelDto {
  @Field() id!: string;
  @Field(() => String) object!: "model";
  @Field(() => Int, { description: "Unix seconds." }) created!: number;
  @Field({ name: "ownedBy" }) owned_by!: string;
  @Field({ name: "displayName" }) display_name!: string;
  @Field(() => String) modality!: Modality;
  @Field(() => ModelCapabilitiesType) capabilities!: ModelCapabilitiesDto;
  @Field(() => Int, { name: "contextTokens" }) context_tokens!: number;
  @Field() provider!: string;
  @Field(() => ModelPricingType) pricing!: ModelPricingDto;
  @Field() released!: string;
  @Field(() => String, {
    name: "deployStatus",
    description: "available, or pending_deploy when the model's file is not downloaded on this server.",
  })
  deploy_status!: "available" | "pending_deploy";
  @Field(() => String, {
    name: "statusReason",
    nullable: true,
    description: "Why the model is not served here, e.g. 'not downloaded: run npm run models -- pull <id>'.",
  })
  status_reason!: string | null;
}

@ObjectType("CatalogModel", {
  description:
    "A model of the control-plane catalog (spec: Catalog model): a platform model, or one of the team's custom models.",
})
export class CatalogModelType implements CatalogModelDto {
  @Field() id!: string;
  @Field({ name: "displayName" }) display_name!: string;
  @Field() provider!: string;
  @Field(() => String, { name: "platformStatus", description: "available, coming_soon or deprecated." })
  platform_status!: PlatformStatus;
  @Field(() => String) modality!: Modality;
  @Field(() => Int, { name: "contextTokens" }) context_tokens!: number;
  @Field() released!: string;
  @Field() deprecated!: string;
  @Field(() => Float, { name: "inputPerMillionUsd" }) input_per_million_usd!: number;
  @Field(() => Float, { name: "outputPerMillionUsd" }) output_per_million_usd!: number;
  @Field(() => Float, { name: "cachedInputPerMillionUsd" }) cached_input_per_million_usd!: number;
  @Field({ name: "tpmLimit", description: 'Tokens per minute per team, or "unlimited".' }) tpm_limit!: string;
  @Field({ name: "rpmLimit", description: 'Requests per minute per team, or "unlimited".' }) rpm_limit!: string;
  @Field({ name: "requestsPerHour", description: 'Requests per hour per team, or "—" when unlimited.' })
  requests_per_hour!: string;
  @Field({ name: "deployedOnPlatform" }) deployed_on_platform!: boolean;
  @Field(() => ModelCapabilitiesType) capabilities!: ModelCapabilitiesDto;
  @Field(() => String, { description: "platform or custom." }) ownership!: "platform" | "custom";
  @Field(() => String, {
    name: "deployStatus",
    description: "pending_deploy, deploying, available, rejected or failed.",
  })
  deploy_status!: DeployStatus;
  @Field() architecture!: string;
  @Field({ name: "hasModelHubToken" }) has_model_hub_token!: boolean;
  @Field(() => String, { name: "statusReason", nullable: true }) status_reason!: string | null;
  @Field(() => String, { name: "artifactType", nullable: true, description: "Custom models: full or lora." })
  artifact_type!: ArtifactType | null;
  @Field(() => String, { name: "baseModelId", nullable: true }) base_model_id!: string | null;
  @Field(() => String, { name: "hfRepo", nullable: true }) hf_repo!: string | null;
  @Field(() => String, { name: "hfRevision", nullable: true }) hf_revision!: string | null;
  @Field(() => String, { nullable: true }) notes!: string | null;
  @Field(() => Date, { name: "createdAt", nullable: true, description: "Custom models only." })
  created_at!: Date | null;
  @Field(() => Date, { name: "updatedAt", nullable: true, description: "Custom models only." })
  updated_at!: Date | null;
}

@ObjectType("CatalogModelList")
export class CatalogModelListType implements CatalogModelList {
  @Field(() => [CatalogModelType]) models!: CatalogModelDto[];
}

@ObjectType("ModelSearchItem", { description: "spec: Search item." })
export class ModelSearchItemType implements ModelSearchItemDto {
  @Field() id!: string;
  @Field({ name: "displayName" }) display_name!: string;
  @Field() provider!: string;
  @Field(() => String) modality!: Modality;
  @Field(() => Int, { name: "contextTokens" }) context_tokens!: number;
  @Field() released!: string;
  @Field(() => Float, { name: "inputPerMillionUsd" }) input_per_million_usd!: number;
  @Field(() => Float, { name: "outputPerMillionUsd" }) output_per_million_usd!: number;
  @Field(() => Float, { name: "cachedInputPerMillionUsd" }) cached_input_per_million_usd!: number;
  @Field({ name: "tpmLimit" }) tpm_limit!: string;
  @Field({ name: "rpmLimit" }) rpm_limit!: string;
  @Field({ name: "requestsPerHour" }) requests_per_hour!: string;
  @Field(() => String, { name: "catalogStatus" }) catalog_status!: PlatformStatus;
  @Field({ name: "deployedOnPlatform" }) deployed_on_platform!: boolean;
  @Field(() => String) source!: "catalog";
}

@ObjectType("ModelSearchResult")
export class ModelSearchResultType implements ModelSearchResult {
  @Field(() => [ModelSearchItemType]) items!: ModelSearchItemDto[];
}

@ObjectType("OkResult")
export class OkResultType implements OkResult {
  @Field(() => Boolean) ok!: true;
}

@InputType("CreateCustomModelInput", { description: "DESIGN §3 Models and deployments: fields and bounds." })
export class CreateCustomModelInputType {
  @Field({ description: "1 to 512 characters; not a platform model's id." }) modelId!: string;
  @Field({ description: "qwen, llama, kimi, glm, deepseek, minimax, gemma, gpt_oss or custom." })
  architecture!: string;
  @Field(() => String, { nullable: true }) displayName?: string | null;
  @Field(() => String, { nullable: true, description: "text_generation (default) or text_embedding." })
  modality?: string | null;
  @Field(() => String, { nullable: true, description: "full (default) or lora." }) artifactType?: string | null;
  @Field(() => String, { nullable: true }) baseModelId?: string | null;
  @Field(() => String, { nullable: true }) hfRepo?: string | null;
  @Field(() => String, { nullable: true }) hfRevision?: string | null;
  @Field(() => String, { nullable: true, description: "Stored encrypted; only reported as hasModelHubToken." })
  hfToken?: string | null;
  @Field(() => String, { nullable: true, description: "At most 4000 characters." }) notes?: string | null;

  /** The service's input (REST names). */
  static toService(input: CreateCustomModelInputType): CreateCustomModelInput {
    return {
      model_id: input.modelId,
      architecture: input.architecture as CreateCustomModelInput["architecture"],
      display_name: absent(input.displayName),
      modality: absent(input.modality) as CreateCustomModelInput["modality"],
      artifact_type: absent(input.artifactType) as CreateCustomModelInput["artifact_type"],
      base_model_id: absent(input.baseModelId),
      hf_repo: absent(input.hfRepo),
      hf_revision: absent(input.hfRevision),
      hf_token: absent(input.hfToken),
      notes: absent(input.notes),
    };
  }
}

@InputType("RequestDeploymentInput")
export class RequestDeploymentInputType {
  @Field({ description: "A custom model of the team." }) modelId!: string;

  /** The service's input (REST names). */
  static toService(input: RequestDeploymentInputType): RequestDeploymentInput {
    return { model_id: input.modelId };
  }
}
