/**
 * GraphQL types of API keys. `ApiKey` itself is the entity (`entities/api-key.entity.ts`); the
 * one-time creation answer keeps its DTO properties under camelCase GraphQL names; the input uses
 * GraphQL names as properties and `toService` maps them (see `mapped-arg.ts`).
 */
import { Field, Float, InputType, Int, ObjectType } from "type-graphql";
import { ApiKeyEntity } from "../entities/api-key.entity.js";
import type {
  ApiKeyList,
  CreateApiKeyInput,
  CreatedApiKeyDto,
  UpdateApiKeyInput,
} from "../services/accounts/api-key.service.js";
import { absent } from "./mapped-arg.js";

@ObjectType("ApiKeyList")
export class ApiKeyListType implements ApiKeyList {
  @Field(() => [ApiKeyEntity]) items!: ApiKeyEntity[];
}

@ObjectType("CreatedApiKey", { description: "A new key; `plaintext` is shown this once." })
export class CreatedApiKeyType implements CreatedApiKeyDto {
  @Field() id!: string;
  @Field() name!: string;
  @Field() plaintext!: string;
  @Field() prefix!: string;
  @Field({ name: "createdAt" }) created_at!: Date;
  @Field(() => Date, { name: "expiresAt", nullable: true }) expires_at!: Date | null;
  @Field(() => ApiKeyEntity, { description: "The key as listed: its policy and spend." }) key!: ApiKeyEntity;
}

/** The policy fields both inputs share (issue 29, item 1), under their GraphQL names. */
@InputType("KeyPolicyInputFields")
class KeyPolicyInputFields {
  @Field(() => Float, { nullable: true, description: "Micro-USD the key may spend per budgetPeriod; null: none." })
  budgetMicros?: number | null;
  @Field(() => String, { nullable: true, description: "day, week or month (UTC), or total." })
  budgetPeriod?: string | null;
  @Field(() => Int, { nullable: true, description: "Requests per minute." })
  rpmLimit?: number | null;
  @Field(() => Int, { nullable: true, description: "Tokens (prompt + completion) per minute." })
  tpmLimit?: number | null;
  @Field(() => [String], { nullable: true, description: 'Model ids the key may use; ["*"]: every model.' })
  allowedModels?: string[] | null;
  @Field(() => String, { nullable: true, description: "ISO 8601 date-time in the future." })
  expiresAt?: string | null;
}

/** The REST names of the policy fields `input` has (an explicit null kept: it lifts the limit). */
function policyToService(input: KeyPolicyInputFields): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if ("budgetMicros" in input) out.budget_micros = input.budgetMicros;
  if ("budgetPeriod" in input) out.budget_period = input.budgetPeriod;
  if ("rpmLimit" in input) out.rpm_limit = input.rpmLimit;
  if ("tpmLimit" in input) out.tpm_limit = input.tpmLimit;
  if ("allowedModels" in input) out.allowed_models = input.allowedModels;
  if ("expiresAt" in input) out.expires_at = input.expiresAt;
  return out;
}

@InputType("CreateApiKeyInput")
export class CreateApiKeyInputType extends KeyPolicyInputFields {
  @Field({ description: "1 to 200 characters." }) name!: string;

  /** The service's input (REST names); a null field is left out, as on create it means no limit. */
  static toService(input: CreateApiKeyInputType): CreateApiKeyInput {
    const policy = Object.fromEntries(Object.entries(policyToService(input)).map(([k, v]) => [k, absent(v)]));
    return { ...policy, name: input.name } as CreateApiKeyInput;
  }
}

@InputType("UpdateApiKeyInput")
export class UpdateApiKeyInputType extends KeyPolicyInputFields {
  @Field(() => String, { nullable: true, description: "1 to 200 characters." }) name?: string | null;

  /** The service's input (REST names); an explicit null lifts that limit. */
  static toService(input: UpdateApiKeyInputType): UpdateApiKeyInput {
    const out = policyToService(input);
    if ("name" in input) out.name = absent(input.name);
    return out as UpdateApiKeyInput;
  }
}
