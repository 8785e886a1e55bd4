/**
 * Model resolver: the data-plane model list (the platform catalog plus the caller's team's own
 * models), and the control plane's catalog, search, custom models and deployment requests
 * (issue 9), over GraphQL and, through the REST table, REST. Each method is one service call;
 * inputs arrive in the REST spelling (see `MappedArg`).
 */
import { Arg, Ctx, Mutation, Query, Resolver } from "type-graphql";
import { MappedArg } from "../schema/mapped-arg.js";
import {
  CatalogModelListType,
  CatalogModelType,
  CreateCustomModelInputType,
  ModelSearchResultType,
  ModelType,
  OkResultType,
  RequestDeploymentInputType,
} from "../schema/model.types.js";
import { type RequestContext, requirePrincipal } from "../services/platform/context.js";
import type { ModelCatalogService, ModelDto } from "../services/models/model-catalog.service.js";
import type { CatalogModelDto, CatalogModelList, ModelSearchResult } from "../services/models/catalog-views.js";
import type {
  CreateCustomModelInput,
  CustomModelsService,
  OkResult,
  RequestDeploymentInput,
  SearchModelsQuery,
} from "../services/models/custom-models.service.js";

@Resolver()
export class ModelResolver {
  constructor(
    private readonly catalog: ModelCatalogService,
    private readonly customModels: CustomModelsService,
  ) {}

  @Query(() => [ModelType], { description: "Models on offer to the caller's team (spec: Model)." })
  models(@Ctx() ctx: RequestContext): ModelDto[] {
    return this.catalog.list(requirePrincipal(ctx).teamId);
  }

  @Query(() => ModelType, { description: "One model by id (404 when not listed)." })
  model(@Arg("id", () => String) id: string, @Ctx() ctx: RequestContext): ModelDto {
    return this.catalog.get(requirePrincipal(ctx).teamId, id);
  }

  @Query(() => CatalogModelListType, {
    description: "The platform catalog (every status), then the team's custom models (spec: Catalog model).",
  })
  modelCatalog(@Ctx() ctx: RequestContext): Promise<CatalogModelList> {
    return this.customModels.catalog(ctx);
  }

  @Query(() => ModelSearchResultType, {
    description: "Platform catalog models whose id, display name or provider contains q (case-insensitive).",
  })
  searchModels(
    @Arg("q", () => String, { nullable: true }) q: string | null,
    @Arg("modality", () => String, { nullable: true, description: "Default text_generation." })
    modality: string | null,
    @Arg("status", () => String, {
      nullable: true,
      description: "available, coming_soon, deprecated or all (default).",
    })
    status: string | null,
    @Ctx() ctx: RequestContext,
  ): ModelSearchResult {
    const query: SearchModelsQuery = {
      q: q ?? undefined,
      modality: modality ?? undefined,
      status: status ?? undefined,
    };
    return this.customModels.search(ctx, query);
  }

  @Mutation(() => CatalogModelType, { description: "Creates a custom model of the team (owners and admins)." })
  createCustomModel(
    @MappedArg("input", () => CreateCustomModelInputType, CreateCustomModelInputType.toService)
    input: CreateCustomModelInput,
    @Ctx() ctx: RequestContext,
  ): Promise<CatalogModelDto> {
    return this.customModels.create(ctx, input);
  }

  @Mutation(() => Boolean, { description: "Deletes a custom model of the team (owners and admins); true when done." })
  async deleteCustomModel(@Arg("modelId", () => String) modelId: string, @Ctx() ctx: RequestContext): Promise<boolean> {
    await this.customModels.remove(ctx, { model_id: modelId });
    return true;
  }

  @Mutation(() => OkResultType, {
    description: "Asks for a custom model to be deployed; its deployStatus moves as the reconciler acts.",
  })
  requestDeployment(
    @MappedArg("input", () => RequestDeploymentInputType, RequestDeploymentInputType.toService)
    input: RequestDeploymentInput,
    @Ctx() ctx: RequestContext,
  ): Promise<OkResult> {
    return this.customModels.requestDeployment(ctx, input);
  }
}
