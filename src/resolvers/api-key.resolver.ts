/** API-key resolver: list, create, revoke. Inputs arrive in the REST spelling (see `MappedArg`). */
import { Arg, Ctx, Mutation, Query, Resolver } from "type-graphql";
import { ApiKeyListType, CreateApiKeyInputType, CreatedApiKeyType } from "../schema/api-key.types.js";
import { MappedArg } from "../schema/mapped-arg.js";
import type { ApiKeyListDto, ApiKeyService, CreateApiKeyInput, CreatedApiKeyDto } from "../services/api-key.service.js";
import type { RequestContext } from "../services/context.js";

@Resolver()
export class ApiKeyResolver {
  constructor(private readonly keys: ApiKeyService) {}

  @Query(() => ApiKeyListType, { description: "Keys the caller may manage, newest first." })
  apiKeys(@Ctx() ctx: RequestContext): Promise<ApiKeyListDto> {
    return this.keys.list(ctx);
  }

  @Mutation(() => CreatedApiKeyType)
  createApiKey(
    @MappedArg("input", () => CreateApiKeyInputType, CreateApiKeyInputType.toService) input: CreateApiKeyInput,
    @Ctx() ctx: RequestContext,
  ): Promise<CreatedApiKeyDto> {
    return this.keys.create(ctx, input);
  }

  @Mutation(() => Boolean, { description: "Revokes a key; true when done (also when already revoked)." })
  async revokeApiKey(@Arg("id", () => String) id: string, @Ctx() ctx: RequestContext): Promise<boolean> {
    await this.keys.revoke(ctx, id);
    return true;
  }
}
