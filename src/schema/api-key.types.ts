/**
 * GraphQL types of API keys. `ApiKey` itself is the entity (`entities/api-key.entity.ts`); the
 * one-time creation answer keeps its DTO properties under camelCase GraphQL names; the input uses
 * GraphQL names as properties and `toService` maps them (see `mapped-arg.ts`).
 */
import { Field, InputType, ObjectType } from "type-graphql";
import { ApiKeyEntity } from "../entities/api-key.entity.js";
import type { ApiKeyList, CreateApiKeyInput, CreatedApiKeyDto } from "../services/accounts/api-key.service.js";
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
}

@InputType("CreateApiKeyInput")
export class CreateApiKeyInputType {
  @Field({ description: "1 to 200 characters." }) name!: string;
  @Field(() => String, { nullable: true, description: "ISO 8601 date-time in the future." })
  expiresAt?: string | null;

  /** The service's input (REST names). */
  static toService(input: CreateApiKeyInputType): CreateApiKeyInput {
    return { name: input.name, expires_at: absent(input.expiresAt) };
  }
}
