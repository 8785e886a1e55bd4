/** Model resolver: the data-plane model list. */
import { Arg, Ctx, Query, Resolver } from "type-graphql";
import { ModelType } from "../schema/model.types.js";
import { type RequestContext, requirePrincipal } from "../services/context.js";
import type { ModelCatalogService, ModelDto } from "../services/model-catalog.service.js";

@Resolver()
export class ModelResolver {
  constructor(private readonly catalog: ModelCatalogService) {}

  @Query(() => [ModelType], { description: "Models on offer (spec: Model)." })
  models(@Ctx() ctx: RequestContext): ModelDto[] {
    requirePrincipal(ctx);
    return this.catalog.list();
  }

  @Query(() => ModelType, { description: "One model by id (404 when not listed)." })
  model(@Arg("id", () => String) id: string, @Ctx() ctx: RequestContext): ModelDto {
    requirePrincipal(ctx);
    return this.catalog.get(id);
  }
}
