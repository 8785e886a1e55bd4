/**
 * The control-plane REST table: every documented `/control/v1` path, mapped onto a resolver
 * method (the same one GraphQL calls), with its success status. Bodies go to the resolvers as they
 * came (the REST spelling is the services' input); validation lives in the services behind those
 * resolvers, so REST and GraphQL answer bad input alike. Resolvers that answer entities (teams,
 * members, API keys) are shaped for REST by `control.presenters.ts`.
 */
import type { Resolvers } from "../resolvers/index.js";
import type { RequestContext } from "../services/platform/context.js";
import type { LoginInput, SignupInput } from "../services/accounts/account.service.js";
import type { CreateApiKeyInput, UpdateApiKeyInput } from "../services/accounts/api-key.service.js";
import type { InviteMemberInput, UpdateMemberInput } from "../services/teams/member.service.js";
import type { ForgotPasswordInput, ResetPasswordInput } from "../services/accounts/password-reset.service.js";
import type { UpdateTeamInput } from "../services/teams/team.service.js";
import type { OAuthCompleteInput } from "../services/accounts/oauth/oauth.service.js";
import type { CreateCustomModelInput, RequestDeploymentInput } from "../services/models/custom-models.service.js";
import type { CreateDeploymentInput } from "../services/models/deployments.service.js";
import { activityListQuery, usageQuery, userFilterQuery } from "../services/usage/activity.service.js";
import { createApiKeyInput, updateApiKeyInput } from "../services/accounts/api-key.service.js";
import { loginInput, signupInput } from "../services/accounts/account.service.js";
import { billingSummaryQuery } from "../services/usage/billing-summary.service.js";
import {
  confirmQuery,
  invoiceBody,
  topUpBody,
  topUpQuery,
  transactionsQuery,
} from "../services/billing/billing.dto.js";
import { inviteMemberInput, updateMemberInput } from "../services/teams/member.service.js";
import {
  createCustomModelInput,
  deleteCustomModelQuery,
  requestDeploymentInput,
  searchModelsQuery,
} from "../services/models/custom-models.service.js";
import { createDeploymentInput } from "../services/models/deployments.service.js";
import { oauthCompleteInput } from "../services/accounts/oauth/oauth.service.js";
import { forgotPasswordInput, resetPasswordInput } from "../services/accounts/password-reset.service.js";
import { updateTeamInput } from "../services/teams/team.service.js";
import { deliveryListQuery } from "../services/events/webhooks/webhook-deliveries.service.js";
import { responseShapes } from "./openapi-shapes.js";
import type { RouteDoc } from "./route-doc.js";
import {
  activityDetailJson,
  activityListJson,
  apiKeyJson,
  apiKeyListJson,
  createdApiKeyJson,
  deploymentJson,
  invitedMemberJson,
  memberJson,
  teamJson,
  userJson,
  withUserJson,
} from "./control.presenters.js";

/** What a route receives from the HTTP request. */
export interface RouteInput {
  body: unknown;
  params: Record<string, string>;
  query: Record<string, unknown>;
  /** A request header (lowercase name), for the routes that read one (the Stripe webhook's signature). */
  header: (name: string) => string | undefined;
}

export interface RouteSpec {
  method: "get" | "post" | "patch" | "delete";
  path: string;
  /**
   * `required`: 401 before the call when no credentials were presented. `optional`: valid
   * credentials give the call a caller, refused ones only a `credentialError` (as over GraphQL).
   */
  auth: "required" | "optional" | "none";
  /** Success status; 204 sends no body. */
  status: 200 | 201 | 204;
  /** `raw`: the body is handed over as the bytes that came (a Buffer), unparsed (webhook signatures). */
  body?: "raw";
  call: (r: Resolvers, input: RouteInput, ctx: RequestContext) => unknown;
  /** What the OpenAPI document says of this route (`openapi.ts`); without it, a generic object. */
  doc?: RouteDoc;
}

export const controlRoutes: RouteSpec[] = [
  {
    method: "post",
    path: "/control/v1/auth/signup",
    auth: "none",
    status: 201,
    call: async (r, { body }, ctx) => withUserJson(await r.auth.signup(body as SignupInput, ctx)),
    doc: {
      response: responseShapes.SignupResponse,
      summary: "Sign up (a new team, or the inviting team with `invite_token`)",
      body: signupInput,
    },
  },
  {
    method: "post",
    path: "/control/v1/auth/login",
    auth: "none",
    status: 200,
    call: async (r, { body }, ctx) => withUserJson(await r.auth.login(body as LoginInput, ctx)),
    doc: { response: responseShapes.LoginResponse, summary: "Log in: an access token", body: loginInput },
  },
  {
    method: "get",
    path: "/control/v1/auth/me",
    auth: "required",
    status: 200,
    call: async (r, _i, ctx) => userJson(await r.auth.me(ctx)),
    doc: { response: responseShapes.User, summary: "The signed-in user" },
  },
  {
    method: "get",
    path: "/control/v1/auth/api-keys",
    auth: "required",
    status: 200,
    call: async (r, _i, ctx) => apiKeyListJson(await r.apiKeys.apiKeys(ctx)),
    doc: { response: responseShapes.ApiKeyList, summary: "The caller's API keys" },
  },
  {
    method: "post",
    path: "/control/v1/auth/api-keys",
    auth: "required",
    status: 201,
    call: async (r, { body }, ctx) => createdApiKeyJson(await r.apiKeys.createApiKey(body as CreateApiKeyInput, ctx)),
    doc: {
      response: responseShapes.ApiKeyCreateResponse,
      summary: "Create an API key (the key is shown this once), with its policy: budget, rates, models, expiry",
      body: createApiKeyInput,
    },
  },
  {
    method: "patch",
    path: "/control/v1/auth/api-keys/:key_id",
    auth: "required",
    status: 200,
    call: async (r, { params, body }, ctx) =>
      apiKeyJson(await r.apiKeys.updateApiKey(params.key_id, body as UpdateApiKeyInput, ctx)),
    doc: {
      response: responseShapes.ApiKey,
      summary: "Change an API key's name and policy (null lifts a limit); members only tighten their own keys' limits",
      body: updateApiKeyInput,
    },
  },
  {
    method: "delete",
    path: "/control/v1/auth/api-keys/:key_id",
    auth: "required",
    status: 204,
    call: (r, { params }, ctx) => r.apiKeys.revokeApiKey(params.key_id, ctx),
    doc: { summary: "Revoke an API key" },
  },
  // OpenID Connect (issue 8, item 2): the authorize helper binds its state to a signed-in caller.
  {
    method: "get",
    path: "/control/v1/auth/oauth/:provider/authorize",
    auth: "optional",
    status: 200,
    call: (r, { params }, ctx) => r.auth.oauthAuthorize(params.provider, ctx),
    doc: {
      response: responseShapes.OAuthAuthorizeResponse,
      summary: "Start an OpenID Connect sign-in: the provider URL and state",
    },
  },
  {
    method: "post",
    path: "/control/v1/auth/oauth/complete",
    auth: "none",
    status: 200,
    call: async (r, { body }, ctx) => withUserJson(await r.auth.oauthComplete(body as OAuthCompleteInput, ctx)),
    doc: {
      response: responseShapes.LoginResponse,
      summary: "Finish an OpenID Connect sign-in",
      body: oauthCompleteInput,
    },
  },
  {
    method: "post",
    path: "/control/v1/auth/link-oauth",
    auth: "required",
    status: 200,
    call: (r, { body }, ctx) => r.auth.linkOAuth(body as OAuthCompleteInput, ctx),
    doc: {
      response: responseShapes.LinkOAuthResponse,
      summary: "Link an OpenID Connect account to the caller",
      description: "Needs a signed-in session's access token; an API key gets 403.",
      body: oauthCompleteInput,
      credentials: "access-token",
    },
  },
  {
    method: "get",
    path: "/control/v1/auth/linked-accounts",
    auth: "required",
    status: 200,
    call: (r, _i, ctx) => r.auth.linkedAccounts(ctx),
    doc: { response: responseShapes.LinkedAccountsResponse, summary: "The caller's linked OpenID Connect accounts" },
  },
  {
    method: "get",
    path: "/control/v1/teams/me",
    auth: "required",
    status: 200,
    call: async (r, _i, ctx) => teamJson(r, ctx, await r.teams.team(ctx)),
    doc: { response: responseShapes.Team, summary: "The caller's team and its members" },
  },
  {
    method: "patch",
    path: "/control/v1/teams/me",
    auth: "required",
    status: 200,
    call: async (r, { body }, ctx) => teamJson(r, ctx, await r.teams.updateTeam(body as UpdateTeamInput, ctx)),
    doc: {
      response: responseShapes.Team,
      summary: "Update the team (name, email domain, zero data retention, webhook signing secret)",
      body: updateTeamInput,
    },
  },
  {
    method: "post",
    path: "/control/v1/teams/me/members",
    auth: "required",
    status: 201,
    call: async (r, { body }, ctx) => invitedMemberJson(await r.teams.inviteMember(body as InviteMemberInput, ctx)),
    doc: {
      response: responseShapes.InvitedMember,
      summary: "Invite a member (the invitation token is shown this once)",
      body: inviteMemberInput,
    },
  },
  {
    method: "patch",
    path: "/control/v1/teams/me/members/:user_id",
    auth: "required",
    status: 200,
    call: async (r, { params, body }, ctx) =>
      memberJson(await r.teams.updateMember(params.user_id, body as UpdateMemberInput, ctx)),
    doc: { response: responseShapes.Member, summary: "Change a member's role", body: updateMemberInput },
  },
  {
    method: "delete",
    path: "/control/v1/teams/me/members/:user_id",
    auth: "required",
    status: 204,
    call: (r, { params }, ctx) => r.teams.removeMember(params.user_id, ctx),
    doc: { summary: "Remove a member" },
  },
  {
    method: "post",
    path: "/control/v1/teams/invitations/:token/accept",
    auth: "required",
    status: 200,
    call: async (r, { params }, ctx) => withUserJson(await r.teams.acceptInvitation(params.token, ctx)),
    doc: { response: responseShapes.InvitationAccepted, summary: "Accept an invitation: the caller joins the team" },
  },
  {
    method: "post",
    path: "/control/v1/auth/forgot-password",
    auth: "none",
    status: 200,
    call: (r, { body }, ctx) => r.auth.forgotPassword((body as ForgotPasswordInput | null | undefined)?.email, ctx),
    doc: { response: responseShapes.Message, summary: "Mail a password reset link", body: forgotPasswordInput },
  },
  {
    method: "post",
    path: "/control/v1/auth/reset-password",
    auth: "none",
    status: 200,
    call: (r, { body }, ctx) => {
      const input = body as ResetPasswordInput | null | undefined;
      return r.auth.resetPassword(input?.token, input?.password, ctx);
    },
    doc: {
      response: responseShapes.Message,
      summary: "Set a new password with a mailed token",
      body: resetPasswordInput,
    },
  },
  // Models and deployments (issue 9). Query values go to the services as given (a repeated
  // parameter arrives as an array and is refused there with a 400 naming it).
  {
    method: "get",
    path: "/control/v1/models/catalog",
    auth: "required",
    status: 200,
    call: (r, _i, ctx) => r.models.modelCatalog(ctx),
    doc: { response: responseShapes.CatalogModelList, summary: "The platform model catalog" },
  },
  {
    method: "get",
    path: "/control/v1/models/search",
    auth: "required",
    status: 200,
    call: (r, { query }, ctx) =>
      r.models.searchModels(
        query.q as string | null,
        query.modality as string | null,
        query.status as string | null,
        ctx,
      ),
    doc: { response: responseShapes.ModelSearchResults, summary: "Search the catalog", query: searchModelsQuery },
  },
  {
    method: "post",
    path: "/control/v1/models/custom",
    auth: "required",
    status: 201,
    call: (r, { body }, ctx) => r.models.createCustomModel(body as CreateCustomModelInput, ctx),
    doc: { response: responseShapes.CatalogModel, summary: "Register a custom model", body: createCustomModelInput },
  },
  {
    method: "delete",
    path: "/control/v1/models/custom",
    auth: "required",
    status: 204,
    call: (r, { query }, ctx) => r.models.deleteCustomModel(query.model_id as string, ctx),
    doc: { summary: "Delete a custom model", query: deleteCustomModelQuery },
  },
  {
    method: "post",
    path: "/control/v1/models/request-deployment",
    auth: "required",
    status: 200,
    call: (r, { body }, ctx) => r.models.requestDeployment(body as RequestDeploymentInput, ctx),
    doc: {
      response: responseShapes.RequestDeploymentResponse,
      summary: "Ask for a model to be deployed",
      body: requestDeploymentInput,
    },
  },
  {
    method: "get",
    path: "/control/v1/deployments",
    auth: "required",
    status: 200,
    call: async (r, _i, ctx) => ({ items: (await r.deployments.deployments(ctx)).items.map(deploymentJson) }),
    doc: { response: responseShapes.DeploymentList, summary: "The team's deployments" },
  },
  {
    method: "post",
    path: "/control/v1/deployments",
    auth: "required",
    status: 201,
    call: async (r, { body }, ctx) =>
      deploymentJson(await r.deployments.createDeployment(body as CreateDeploymentInput, ctx)),
    doc: { response: responseShapes.Deployment, summary: "Create a deployment", body: createDeploymentInput },
  },
  {
    method: "delete",
    path: "/control/v1/deployments/:deployment_id",
    auth: "required",
    status: 204,
    call: (r, { params }, ctx) => r.deployments.deleteDeployment(params.deployment_id, ctx),
    doc: { summary: "Delete a deployment" },
  },
  // Activity and usage (issue 10, items 1 and 2). `/activity/models` comes before `/activity/:request_id`.
  {
    method: "get",
    path: "/control/v1/activity",
    auth: "required",
    status: 200,
    call: async (r, { query }, ctx) => activityListJson(await r.activity.list(query, ctx)),
    doc: {
      response: responseShapes.ActivityList,
      summary: "Activity records, a page at a time",
      query: activityListQuery,
    },
  },
  {
    method: "get",
    path: "/control/v1/activity/models",
    auth: "required",
    status: 200,
    call: (r, { query }, ctx) => r.activity.models(query, ctx),
    doc: {
      response: responseShapes.ActivityModels,
      summary: "Models in the caller's activity",
      query: userFilterQuery,
    },
  },
  {
    method: "get",
    path: "/control/v1/activity/:request_id",
    auth: "required",
    status: 200,
    call: async (r, { params }, ctx) => activityDetailJson(await r.activity.activityRecord(params.request_id, ctx)),
    doc: { response: responseShapes.ActivityDetail, summary: "One activity record with its bodies" },
  },
  {
    method: "get",
    path: "/control/v1/usage/daily",
    auth: "required",
    status: 200,
    call: (r, { query }, ctx) => r.activity.daily(query, ctx),
    doc: { response: responseShapes.UsageDaily, summary: "Usage by day and model", query: usageQuery },
  },
  {
    method: "get",
    path: "/control/v1/usage/summary",
    auth: "required",
    status: 200,
    call: (r, { query }, ctx) => r.activity.summary(query, ctx),
    doc: { response: responseShapes.UsageSummary, summary: "Usage totals and by model", query: usageQuery },
  },
  // Billing summary with the pricing used (issue 10, item 3).
  {
    method: "get",
    path: "/control/v1/billing/summary",
    auth: "required",
    status: 200,
    call: (r, { query }, ctx) => r.billingSummary.summary(query, ctx),
    doc: {
      response: responseShapes.BillingSummary,
      summary: "Billing summary with the prices used",
      query: billingSummaryQuery,
    },
  },
  // Billing (issue 10, items 4–6). The confirm link and the Stripe webhook carry their own proof
  // (an HMAC signature, Stripe's signature over the raw body) instead of credentials.
  {
    method: "get",
    path: "/control/v1/billing/transactions",
    auth: "required",
    status: 200,
    call: (r, { query }, ctx) => r.billing.transactions(query, ctx),
    doc: {
      response: responseShapes.TransactionList,
      summary: "Credit ledger transactions, newest first",
      query: transactionsQuery,
    },
  },
  {
    method: "post",
    path: "/control/v1/billing/topups",
    auth: "required",
    status: 201,
    call: (r, { query, body }, ctx) => r.billing.topUp(query, body, ctx),
    doc: {
      response: responseShapes.TopUpSession,
      summary: "Start a credit top-up (idempotent by `nonce`)",
      query: topUpQuery,
      body: topUpBody,
    },
  },
  {
    method: "get",
    path: "/control/v1/billing/topups/local/confirm",
    auth: "none",
    status: 200,
    call: (r, { query }) => r.billing.confirmLocalTopUp(query),
    doc: {
      response: responseShapes.TopUpConfirmation,
      summary: "Confirm a local (no payment provider) top-up: the signed link",
      query: confirmQuery,
    },
  },
  {
    method: "post",
    path: "/control/v1/billing/stripe/webhook",
    auth: "none",
    status: 200,
    body: "raw",
    call: (r, { body, header }) => r.billing.stripeWebhook(body, header("stripe-signature")),
    doc: {
      response: responseShapes.StripeWebhookReceived,
      summary: "Stripe webhook (signed by Stripe over the raw body)",
    },
  },
  {
    method: "post",
    path: "/control/v1/billing/invoices",
    auth: "required",
    status: 201,
    call: (r, { body }, ctx) => r.billing.invoices(body, ctx),
    doc: { response: responseShapes.Invoice, summary: "Create an invoice for a period", body: invoiceBody },
  },
  {
    method: "get",
    path: "/control/v1/billing/invoices/:invoice_id",
    auth: "required",
    status: 200,
    call: (r, { params }, ctx) => r.billing.invoice(params.invoice_id, ctx),
    doc: { response: responseShapes.Invoice, summary: "One invoice" },
  },
  // The webhook delivery log (issue 27, item 6): every member reads it, owners and admins redeliver.
  {
    method: "get",
    path: "/control/v1/webhooks/deliveries",
    auth: "required",
    status: 200,
    call: (r, { query }, ctx) => r.webhooks.list(query, ctx),
    doc: {
      response: responseShapes.WebhookDeliveryList,
      summary: "Completion-webhook deliveries with their attempts, newest first",
      description:
        "Each attempt's time, HTTP status or error (a refused private address says which setting allows it). " +
        "Pages: `limit` 1–100 (25) and `starting_after` (the previous page's `next_starting_after`).",
      query: deliveryListQuery,
    },
  },
  {
    method: "get",
    path: "/control/v1/webhooks/deliveries/:delivery_id",
    auth: "required",
    status: 200,
    call: (r, { params }, ctx) => r.webhooks.delivery(params.delivery_id, ctx),
    doc: { response: responseShapes.WebhookDelivery, summary: "One webhook delivery with its attempts" },
  },
  {
    method: "post",
    path: "/control/v1/webhooks/deliveries/:delivery_id/redeliver",
    auth: "required",
    status: 200,
    call: (r, { params }, ctx) => r.webhooks.redeliver(params.delivery_id, ctx),
    doc: {
      response: responseShapes.WebhookDelivery,
      summary: "Send a failed webhook delivery again (owners and admins)",
      description:
        "The delivery goes back to `pending` with a fresh retry schedule and is sent as every delivery is " +
        "(signed, SSRF guard); its attempts so far stay. A failed delivery stays redeliverable for 7 days " +
        "(`redeliverable_until`); 409 when it is pending or delivered, or no longer kept.",
    },
  },
];
