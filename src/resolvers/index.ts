/**
 * The GraphQL resolvers as one list (issue 25, item 4): `schema/` builds a schema from whatever
 * resolvers it is handed and never imports this folder; the composition root (`src/app/`) and
 * `npm run schema` (`scripts/emit-schema.ts`) hand it these.
 */
import type { BuildSchemaOptions } from "type-graphql";
import type { SchemaResolvers } from "../schema/build-schema.js";
import { ActivityResolver } from "./activity.resolver.js";
import { ApiKeyResolver } from "./api-key.resolver.js";
import { AuthResolver } from "./auth.resolver.js";
import { BatchResolver } from "./batch.resolver.js";
import { BillingSummaryResolver } from "./billing-summary.resolver.js";
import { BillingResolver } from "./billing.resolver.js";
import { CompletionEventsResolver } from "./completion-events.resolver.js";
import { DecisionResolver } from "./decision.resolver.js";
import { DeploymentResolver } from "./deployment.resolver.js";
import { ModelResolver } from "./model.resolver.js";
import { ResponseResolver } from "./response.resolver.js";
import { StreamResolver } from "./stream.resolver.js";
import { TeamMemberResolver, TeamResolver } from "./team.resolver.js";
import { WebhookDeliveriesResolver } from "./webhook-deliveries.resolver.js";

/** Resolver instances, one per class of `resolverClasses`; the REST table calls them too. */
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
  webhooks: WebhookDeliveriesResolver;
}

/** Every resolver class, in the order type-graphql reads them (their decorators are the schema). */
export const resolverClasses: BuildSchemaOptions["resolvers"] = [
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
  WebhookDeliveriesResolver,
];

/**
 * What `buildGraphqlSchema` takes: every class of `resolverClasses`, and `resolvers`' instances
 * (type-graphql asks for an instance by class; a class without one fails the build).
 */
export function schemaResolvers(resolvers: Resolvers): SchemaResolvers {
  return { classes: resolverClasses, instances: Object.values(resolvers) };
}
