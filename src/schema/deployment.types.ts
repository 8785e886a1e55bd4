/**
 * GraphQL types of deployments (spec: Deployment). `Deployment` itself is the entity
 * (`entities/deployment.entity.ts`); here are the list and the input, whose properties use the
 * GraphQL names and map to the service's REST-spelled input (see `mapped-arg.ts`).
 */
import { Field, InputType, Int, ObjectType } from "type-graphql";
import { DeploymentEntity } from "../entities/deployment.entity.js";
import type { CreateDeploymentInput, DeploymentList } from "../services/models/deployments.service.js";
import { absent } from "./mapped-arg.js";

@ObjectType("DeploymentList")
export class DeploymentListType implements DeploymentList {
  @Field(() => [DeploymentEntity]) items!: DeploymentEntity[];
}

@InputType("CreateDeploymentInput", { description: "DESIGN §3 Models and deployments: fields, bounds and defaults." })
export class CreateDeploymentInputType {
  @Field({ description: "1 to 256 characters." }) name!: string;
  @Field({ description: "platform or custom." }) modelSource!: string;
  @Field() modelId!: string;
  @Field(() => String, { nullable: true, description: "emea (default) or global." }) region?: string | null;
  @Field(() => String, { nullable: true, description: "cost_saving, standard (default) or turbo." })
  performance?: string | null;
  @Field(() => Int, { nullable: true, description: "0 (default) to maxReplicas." }) minReplicas?: number | null;
  @Field(() => Int, { nullable: true, description: "minReplicas to 1000; default 1." }) maxReplicas?: number | null;
  @Field(() => String, { nullable: true, description: "At most 4000 characters." }) notes?: string | null;

  /** The service's input (REST names). */
  static toService(input: CreateDeploymentInputType): CreateDeploymentInput {
    return {
      name: input.name,
      model_source: input.modelSource as CreateDeploymentInput["model_source"],
      model_id: input.modelId,
      region: absent(input.region) as CreateDeploymentInput["region"],
      performance: absent(input.performance) as CreateDeploymentInput["performance"],
      min_replicas: absent(input.minReplicas),
      max_replicas: absent(input.maxReplicas),
      notes: absent(input.notes),
    };
  }
}
