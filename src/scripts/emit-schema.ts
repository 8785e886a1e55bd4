/**
 * `npm run schema`: builds the GraphQL schema from the resolver classes and writes the committed
 * `schema.graphql` at the repository root, so schema changes show in review
 * (test/graphql.test.ts fails while the committed copy is stale).
 */
import "reflect-metadata";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { GraphQLSchema } from "graphql";
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
import { WebhookDeliveriesResolver } from "../resolvers/webhook-deliveries.resolver.js";
import { type Resolvers, schemaResolvers } from "../resolvers/index.js";
import { buildGraphqlSchema } from "../schema/build-schema.js";
import { SCHEMA_FILE } from "../server.js";
import type { AccountService } from "../services/accounts/account.service.js";
import type { ApiKeyService } from "../services/accounts/api-key.service.js";
import type { BackgroundResponsesService } from "../services/inference/responses/background-responses.service.js";
import type { BatchesService } from "../services/batches/batches.service.js";
import type { CompletionEventsService } from "../services/events/completion-events.service.js";
import type { DecisionsService } from "../services/decisions/decisions.service.js";
import type { MemberService } from "../services/teams/member.service.js";
import type { ActivityService } from "../services/usage/activity.service.js";
import type { BillingSummaryService } from "../services/usage/billing-summary.service.js";
import type { BillingService } from "../services/billing/billing.service.js";
import type { ModelCatalogService } from "../services/models/model-catalog.service.js";
import type { CustomModelsService } from "../services/models/custom-models.service.js";
import type { DeploymentsService } from "../services/models/deployments.service.js";
import type { OAuthService } from "../services/accounts/oauth/oauth.service.js";
import type { PasswordResetService } from "../services/accounts/password-reset.service.js";
import type { StreamsService } from "../services/inference/responses/streams.service.js";
import type { TeamService } from "../services/teams/team.service.js";
import type { WebhookDeliveriesService } from "../services/events/webhooks/webhook-deliveries.service.js";

/**
 * Resolver instances good enough to build the schema: building never calls a service, so each
 * resolver gets a placeholder that must not be used to answer requests.
 */
export function placeholderResolvers(): Resolvers {
  return {
    auth: new AuthResolver(
      undefined as unknown as AccountService,
      undefined as unknown as PasswordResetService,
      undefined as unknown as OAuthService,
    ),
    apiKeys: new ApiKeyResolver(undefined as unknown as ApiKeyService, undefined as unknown as MemberService),
    models: new ModelResolver(undefined as unknown as ModelCatalogService, undefined as unknown as CustomModelsService),
    responses: new ResponseResolver(undefined as unknown as BackgroundResponsesService),
    events: new CompletionEventsResolver(
      undefined as unknown as CompletionEventsService,
      undefined as unknown as StreamsService,
    ),
    teams: new TeamResolver(undefined as unknown as TeamService, undefined as unknown as MemberService),
    streams: new StreamResolver(undefined as unknown as StreamsService),
    batches: new BatchResolver(undefined as unknown as BatchesService),
    teamMembers: new TeamMemberResolver(undefined as unknown as MemberService),
    deployments: new DeploymentResolver(undefined as unknown as DeploymentsService),
    activity: new ActivityResolver(undefined as unknown as ActivityService),
    billingSummary: new BillingSummaryResolver(undefined as unknown as BillingSummaryService),
    billing: new BillingResolver(undefined as unknown as BillingService),
    decisions: new DecisionResolver(undefined as unknown as DecisionsService),
    webhooks: new WebhookDeliveriesResolver(undefined as unknown as WebhookDeliveriesService),
  };
}

/** Builds the schema; with `file`, type-graphql writes it there (sorted, with its header). */
export function buildSchemaForEmit(file: string | false = false): Promise<GraphQLSchema> {
  return buildGraphqlSchema(schemaResolvers(placeholderResolvers()), file);
}

const invokedDirectly =
  process.argv[1] !== undefined && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url);
if (invokedDirectly) {
  buildSchemaForEmit(SCHEMA_FILE).then(
    () => process.stdout.write(`wrote ${SCHEMA_FILE}\n`),
    (err: unknown) => {
      process.stderr.write(`emit-schema: ${err instanceof Error ? err.stack : String(err)}\n`);
      process.exit(1);
    },
  );
}
