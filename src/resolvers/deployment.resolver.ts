/**
 * Deployment resolver (issue 9; spec: Deployment): list, create and delete a team's dedicated
 * deployments, over GraphQL and, through the REST table, REST. `Deployment` is the entity; inputs
 * arrive in the REST spelling (see `MappedArg`).
 */
import { Arg, Ctx, ID, Mutation, Query, Resolver } from "type-graphql";
import { DeploymentEntity } from "../entities/deployment.entity.js";
import { CreateDeploymentInputType, DeploymentListType } from "../schema/deployment.types.js";
import { MappedArg } from "../schema/mapped-arg.js";
import type { RequestContext } from "../services/platform/context.js";
import type {
  CreateDeploymentInput,
  DeploymentList,
  DeploymentsService,
} from "../services/models/deployments.service.js";

@Resolver(() => DeploymentEntity)
export class DeploymentResolver {
  constructor(private readonly service: DeploymentsService) {}

  @Query(() => DeploymentListType, { description: "The team's deployments, newest first." })
  deployments(@Ctx() ctx: RequestContext): Promise<DeploymentList> {
    return this.service.list(ctx);
  }

  @Mutation(() => DeploymentEntity, {
    description: "Creates a deployment (owners and admins), pending_deploy until the reconciler brings it up.",
  })
  createDeployment(
    @MappedArg("input", () => CreateDeploymentInputType, CreateDeploymentInputType.toService)
    input: CreateDeploymentInput,
    @Ctx() ctx: RequestContext,
  ): Promise<DeploymentEntity> {
    return this.service.create(ctx, input);
  }

  @Mutation(() => Boolean, { description: "Deletes a deployment of the team (owners and admins); true when done." })
  async deleteDeployment(@Arg("id", () => ID) id: string, @Ctx() ctx: RequestContext): Promise<boolean> {
    await this.service.remove(ctx, id);
    return true;
  }
}
