/** GraphQL types of the model list (spec: Model). */
import { Field, Float, Int, ObjectType } from "type-graphql";
import type { Modality } from "../config/catalog.js";
import type {
  ModelCapabilitiesDto,
  ModelDto,
  ModelPricingDto,
  SupportedDto,
} from "../services/model-catalog.service.js";

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

@ObjectType("ModelCapabilities")
export class ModelCapabilitiesType implements ModelCapabilitiesDto {
  @Field(() => SupportedType, { name: "imageInput" }) image_input!: SupportedDto;
  @Field(() => SupportedType, { name: "pdfInput" }) pdf_input!: SupportedDto;
  @Field(() => ThinkingType) thinking!: ThinkingType;
  @Field(() => SupportedType) tools!: SupportedDto;
  @Field(() => Int, { nullable: true, description: "Embedding width (embedding models)." }) dimensions!: number | null;
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
}
