/**
 * API-key resolver: list, create, update (name and policy), revoke, and each key's user (batched
 * per request). Inputs arrive in the REST spelling (see `MappedArg`).
 */
import { Arg, Ctx, FieldResolver, Mutation, Query, Resolver, Root } from "type-graphql";
import { ApiKeyEntity } from "../entities/api-key.entity.js";
import { UserEntity } from "../entities/user.entity.js";
import {
  ApiKeyListType,
  CreateApiKeyInputType,
  CreatedApiKeyType,
  UpdateApiKeyInputType,
} from "../schema/api-key.types.js";
import { MappedArg } from "../schema/mapped-arg.js";
import type {
  ApiKeyList,
  ApiKeyService,
  CreateApiKeyInput,
  CreatedApiKeyDto,
  UpdateApiKeyInput,
} from "../services/accounts/api-key.service.js";
import type { RequestContext } from "../services/platform/context.js";
import type { MemberService } from "../services/teams/member.service.js";

@Resolver(() => ApiKeyEntity)
export class ApiKeyResolver {
  constructor(
    private readonly keys: ApiKeyService,
    private readonly members: MemberService,
  ) {}

  @Query(() => ApiKeyListType, {
    description: "Keys the caller may manage (owners and admins: every key of the team), newest first.",
  })
  apiKeys(@Ctx() ctx: RequestContext): Promise<ApiKeyList> {
    return this.keys.list(ctx);
  }

  @Mutation(() => CreatedApiKeyType)
  createApiKey(
    @MappedArg("input", () => CreateApiKeyInputType, CreateApiKeyInputType.toService) input: CreateApiKeyInput,
    @Ctx() ctx: RequestContext,
  ): Promise<CreatedApiKeyDto> {
    return this.keys.create(ctx, input);
  }

  @Mutation(() => ApiKeyEntity, {
    description:
      "Changes a key's name and policy: the fields given change, null lifts a limit. Members may " +
      "only tighten their own keys' limits.",
  })
  updateApiKey(
    @Arg("id", () => String) id: string,
    @MappedArg("input", () => UpdateApiKeyInputType, UpdateApiKeyInputType.toService) input: UpdateApiKeyInput,
    @Ctx() ctx: RequestContext,
  ): Promise<ApiKeyEntity> {
    return this.keys.update(ctx, id, input);
  }

  @Mutation(() => Boolean, { description: "Revokes a key; true when done (also when already revoked)." })
  async revokeApiKey(@Arg("id", () => String) id: string, @Ctx() ctx: RequestContext): Promise<boolean> {
    await this.keys.revoke(ctx, id);
    return true;
  }

  @FieldResolver(() => UserEntity, { nullable: true, description: "The key's owner; null once they left the team." })
  async user(@Root() key: ApiKeyEntity, @Ctx() ctx: RequestContext): Promise<UserEntity | null> {
    return this.members.userOf(ctx, key);
  }
}
