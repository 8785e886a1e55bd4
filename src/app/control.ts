/**
 * What only an API process builds (a `worker` process serves no HTTP): the control plane's
 * services (accounts, teams, members, OAuth sign-in, password reset, models, billing, decisions)
 * and the GraphQL resolvers over them, and the dependencies of the REST handlers.
 */
import type { Logger } from "pino";
import type { DataSource } from "typeorm";
import type { Config } from "../config/config.js";
import type { DataPlaneDeps } from "../rest/handlers/deps.js";
import { ActivityResolver } from "../resolvers/activity.resolver.js";
import { ApiKeyResolver } from "../resolvers/api-key.resolver.js";
import { AuthResolver } from "../resolvers/auth.resolver.js";
import { BatchResolver } from "../resolvers/batch.resolver.js";
import { BillingSummaryResolver } from "../resolvers/billing-summary.resolver.js";
import { BillingResolver } from "../resolvers/billing.resolver.js";
import { CompletionEventsResolver } from "../resolvers/completion-events.resolver.js";
import { DecisionResolver } from "../resolvers/decision.resolver.js";
import { DeploymentResolver } from "../resolvers/deployment.resolver.js";
import type { Resolvers } from "../resolvers/index.js";
import { ModelResolver } from "../resolvers/model.resolver.js";
import { ResponseResolver } from "../resolvers/response.resolver.js";
import { StreamResolver } from "../resolvers/stream.resolver.js";
import { TeamMemberResolver, TeamResolver } from "../resolvers/team.resolver.js";
import { WebhookDeliveriesResolver } from "../resolvers/webhook-deliveries.resolver.js";
import { AccountService } from "../services/accounts/account.service.js";
import { ApiKeyService } from "../services/accounts/api-key.service.js";
import { OAuthService } from "../services/accounts/oauth/oauth.service.js";
import { OidcProviders } from "../services/accounts/oauth/oidc-providers.js";
import { PasswordResetService } from "../services/accounts/password-reset.service.js";
import { BillingService } from "../services/billing/billing.service.js";
import { LocalPaymentProvider, warnOfLocalPayments } from "../services/billing/payment-provider.js";
import { StripePaymentProvider } from "../services/billing/stripe-provider.js";
import { DecisionsService } from "../services/decisions/decisions.service.js";
import { WebhookDeliveriesService } from "../services/events/webhooks/webhook-deliveries.service.js";
import { WEBHOOK_TOKEN_PURPOSE } from "../services/events/webhooks/webhook-dispatcher.js";
import { StreamsService } from "../services/inference/responses/streams.service.js";
import { CustomModelsService } from "../services/models/custom-models.service.js";
import { DeploymentsService } from "../services/models/deployments.service.js";
import { HealthService } from "../services/models/health.service.js";
import { SecretBox } from "../services/models/secret-box.js";
import type { CacheBus } from "../services/platform/cache-bus.js";
import { AuthThrottle } from "../services/platform/auth-throttle.js";
import { MemberService } from "../services/teams/member.service.js";
import { TeamService } from "../services/teams/team.service.js";
import type { ControlLoaders } from "../services/teams/control-loaders.js";
import { ActivityService } from "../services/usage/activity.service.js";
import { BillingSummaryService } from "../services/usage/billing-summary.service.js";
import type { DatabaseParts } from "./database.js";
import type { Lifecycle } from "./lifecycle.js";
import type { ModelParts } from "./models.js";
import type { CoreServices } from "./services.js";
import type { WorkerParts } from "./workers.js";

/**
 * Builds the control plane and starts the component "password reset mail" (mail still being sent
 * when HTTP stops is finished before the mailer and the database close).
 * @returns the REST handlers' dependencies, the resolvers among them.
 */
export async function startControlPlane(
  config: Config,
  logger: Logger,
  life: Lifecycle,
  { dataSource: ds, bus, circuit }: DatabaseParts,
  { engines, catalog, platform, teamModels }: ModelParts,
  { tokens, mailer, streamDirectory, events, inference, responses }: CoreServices,
  { jobs, background, batches }: WorkerParts,
  loaders: ControlLoaders,
): Promise<DataPlaneDeps> {
  const streams = new StreamsService(ds, streamDirectory, background);
  // Issue 8 (helper P): login and forgot-password throttling, password reset mail.
  const throttle = new AuthThrottle(ds, logger, { max: config.authThrottleMax, windowS: config.authThrottleWindowS });
  const passwordResets = await life.start({
    name: "password reset mail",
    start: () =>
      new PasswordResetService(ds, mailer, throttle, bus, logger, {
        resetUrl: config.passwordResetUrl ?? `${config.publicUrl}/reset-password`,
      }),
    stop: (resets) => resets.drain(),
  });
  // Members and invitations (issue 8): per-request DataLoaders for the control plane's relations.
  const members = new MemberService(ds, bus, loaders, mailer, tokens, config.publicUrl);
  const accounts = new AccountService(ds, tokens, config.signupCreditMicros, throttle, members, config.signup);
  // Issue 8 (helper O): OpenID Connect sign-in and linking.
  const oauth = new OAuthService(ds, accounts, new OidcProviders(config.oauthProviders, logger), members);
  const modelQuotas = { maxDeployments: config.teamMaxDeployments, maxCustomModels: config.teamMaxCustomModels };
  const decisions = new DecisionsService(inference, catalog);
  const resolvers: Resolvers = {
    auth: new AuthResolver(accounts, passwordResets, oauth),
    apiKeys: new ApiKeyResolver(new ApiKeyService(ds, bus), members),
    models: new ModelResolver(
      catalog,
      new CustomModelsService(
        ds,
        bus,
        jobs,
        platform,
        teamModels,
        new SecretBox(config.jwtSecret, "model-hub-token"),
        modelQuotas,
      ),
    ),
    responses: new ResponseResolver(background),
    events: new CompletionEventsResolver(events, streams),
    // Teams (issue 8, item 3; the webhook signing secret of issue 6, item 3).
    teams: new TeamResolver(new TeamService(ds), members),
    streams: new StreamResolver(streams),
    batches: new BatchResolver(batches),
    teamMembers: new TeamMemberResolver(members),
    deployments: new DeploymentResolver(new DeploymentsService(ds, bus, jobs, teamModels, modelQuotas)),
    // Activity and usage (issue 10, items 1 and 2).
    activity: new ActivityResolver(new ActivityService(ds)),
    // Billing summary with the pricing used (issue 10, item 3).
    billingSummary: new BillingSummaryResolver(new BillingSummaryService(ds, platform)),
    // Transactions, top-ups and invoices (issue 10, items 4–6).
    billing: new BillingResolver(billingService(ds, bus, logger, config)),
    // Decisions (issue 11): the same service as POST /v1/decisions.
    decisions: new DecisionResolver(decisions),
    // The webhook delivery log and manual redelivery (issue 27, item 6); it opens the tokens the
    // dispatcher sealed (services.ts), under the same derived key.
    webhooks: new WebhookDeliveriesResolver(
      new WebhookDeliveriesService(ds, bus, new SecretBox(config.jwtSecret, WEBHOOK_TOKEN_PURPOSE)),
    ),
  };
  return {
    resolvers,
    catalog,
    inference,
    responses,
    background,
    events,
    streams,
    health: new HealthService(ds, engines, catalog, logger, circuit),
    batches,
    decisions,
    batchMaxBytes: config.batchMaxBytes,
  };
}

/**
 * The billing service with its payment provider (config `paymentProvider`: `local` by default, or
 * `stripe`). The local provider always verifies confirm links; Stripe webhooks are served when a
 * Stripe secret key is configured.
 */
function billingService(ds: DataSource, bus: CacheBus, logger: Logger, config: Config): BillingService {
  const local = new LocalPaymentProvider(config.jwtSecret, config.publicUrl);
  const stripe = config.stripeSecretKey
    ? new StripePaymentProvider(ds, logger, {
        secretKey: config.stripeSecretKey,
        webhookSecret: config.stripeWebhookSecret,
        apiBase: config.stripeApiBase,
        publicUrl: config.publicUrl,
      })
    : undefined;
  const provider = config.paymentProvider === "stripe" && stripe ? stripe : local;
  warnOfLocalPayments(logger, provider.name, config.publicUrl);
  return new BillingService(ds, bus, provider, local, logger, stripe, {
    perTeam: config.providerCallsPerTeam,
    perProcess: config.providerCallsPerProcess,
  });
}
