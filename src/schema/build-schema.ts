/**
 * Builds the TypeGraphQL schema from the resolvers, with resolver instances supplied by the
 * application (constructor injection, no global container).
 */
import type { GraphQLSchema } from "graphql";
import { type ContainerType, type PubSub, buildSchema } from "type-graphql";
import { ActivityResolver } from "../resolvers/activity.resolver.js";
import { BillingResolver } from "../resolvers/billing.resolver.js";
import { ApiKeyResolver } from "../resolvers/api-key.resolver.js";
import { AuthResolver } from "../resolvers/auth.resolver.js";
import { BatchResolver } from "../resolvers/batch.resolver.js";
import { BillingSummaryResolver } from "../resolvers/billing-summary.resolver.js";
import { CompletionEventsResolver } from "../resolvers/completion-events.resolver.js";
import { DecisionResolver } from "../resolvers/decision.resolver.js";
import { DeploymentResolver } from "../resolvers/deployment.resolver.js";
import { ModelResolver } from "../resolvers/model.resolver.js";
import { ResponseResolver } from "../resolvers/response.resolver.js";
import { StreamResolver } from "../resolvers/stream.resolver.js";
import { TeamMemberResolver, TeamResolver } from "../resolvers/team.resolver.js";

/** Resolver instances, also used by the REST table. */
export interface Resolvers {
  auth: AuthResolver;
  apiKeys: ApiKeyResolver;
  models: ModelResolver;
  responses: ResponseResolver;
  events: CompletionEventsResolver;
  teams: TeamResolver;
  streams: StreamResolver;
  batches: BatchResolver;
  teamMembers: TeamMemberResolver;
  deployments: DeploymentResolver;
  activity: ActivityResolver;
  billingSummary: BillingSummaryResolver;
  billing: BillingResolver;
  decisions: DecisionResolver;
}

export const resolverClasses = [
  AuthResolver,
  ApiKeyResolver,
  ModelResolver,
  ResponseResolver,
  CompletionEventsResolver,
  TeamResolver,
  StreamResolver,
  BatchResolver,
  TeamMemberResolver,
  DeploymentResolver,
  ActivityResolver,
  BillingSummaryResolver,
  BillingResolver,
  DecisionResolver,
] as const;

/**
 * @param emitSchemaFile path to write `schema.graphql` to (the committed copy), or false.
 * @param pubSub what subscriptions read from (the default refuses to subscribe: schema emission only).
 */
export async function buildGraphqlSchema(
  resolvers: Resolvers,
  emitSchemaFile: string | false = false,
  pubSub: PubSub = noPubSub,
): Promise<GraphQLSchema> {
  const instances = new Map<unknown, unknown>(Object.values(resolvers).map((r) => [r.constructor, r]));
  const container: ContainerType = {
    get: (cls) => {
      const instance = instances.get(cls);
      if (!instance) throw new Error(`no resolver instance for ${(cls as { name?: string }).name}`);
      return instance;
    },
  };
  return buildSchema({
    resolvers: resolverClasses,
    container,
    validate: false,
    pubSub,
    emitSchemaFile: emitSchemaFile ? { path: emitSchemaFile, sortedSchema: true } : false,
  });
}

/** A PubSub for building the schema without serving it: subscribing throws. */
const noPubSub: PubSub = {
  publish: () => undefined,
  subscribe: () => {
    throw new Error("subscriptions are not served by this schema");
  },
};
