/**
 * The webhook delivery log over GraphQL and REST (issue 27, item 6): thin over
 * `WebhookDeliveriesService`. GraphQL arguments are handed on as the REST query would carry them,
 * so both surfaces validate alike (a bad `responseId` is a 400 naming `response_id`).
 */
import { Arg, Ctx, ID, Int, Mutation, Query, Resolver } from "type-graphql";
import { WebhookDeliveryPageType, WebhookDeliveryType } from "../schema/webhook-delivery.types.js";
import type { RequestContext } from "../services/platform/context.js";
import type {
  WebhookDeliveriesService,
  WebhookDeliveryDto,
  WebhookDeliveryPageDto,
} from "../services/events/webhooks/webhook-deliveries.service.js";

@Resolver()
export class WebhookDeliveriesResolver {
  constructor(private readonly deliveries: WebhookDeliveriesService) {}

  @Query(() => WebhookDeliveryPageType, {
    description:
      "The team's completion-webhook deliveries with their attempts, newest first; limit 1–100 (25); " +
      "filters: responseId, status (pending, delivered, failed).",
  })
  webhookDeliveries(
    @Ctx() ctx: RequestContext,
    @Arg("limit", () => Int, { nullable: true }) limit?: number | null,
    @Arg("startingAfter", () => ID, { nullable: true }) startingAfter?: string | null,
    @Arg("responseId", () => ID, { nullable: true }) responseId?: string | null,
    @Arg("status", () => String, { nullable: true }) status?: string | null,
  ): Promise<WebhookDeliveryPageDto> {
    const query: Record<string, string> = {};
    if (limit != null) query.limit = String(limit);
    if (startingAfter != null) query.starting_after = startingAfter;
    if (responseId != null) query.response_id = responseId;
    if (status != null) query.status = status;
    return this.list(query, ctx);
  }

  /** `GET /control/v1/webhooks/deliveries`. */
  list(query: unknown, ctx: RequestContext): Promise<WebhookDeliveryPageDto> {
    return this.deliveries.list(ctx, query);
  }

  @Query(() => WebhookDeliveryType, { description: "One delivery of the team with its attempts." })
  webhookDelivery(@Arg("id", () => ID) id: string, @Ctx() ctx: RequestContext): Promise<WebhookDeliveryDto> {
    return this.delivery(id, ctx);
  }

  /** `GET /control/v1/webhooks/deliveries/{delivery_id}`. */
  delivery(id: string, ctx: RequestContext): Promise<WebhookDeliveryDto> {
    return this.deliveries.get(ctx, id);
  }

  @Mutation(() => WebhookDeliveryType, {
    description:
      "Sends a failed delivery again (owners and admins): it goes back to pending with a fresh retry schedule; " +
      "its attempts so far stay. 409 when it is pending or delivered, or no longer kept.",
  })
  redeliverWebhook(@Arg("id", () => ID) id: string, @Ctx() ctx: RequestContext): Promise<WebhookDeliveryDto> {
    return this.redeliver(id, ctx);
  }

  /** `POST /control/v1/webhooks/deliveries/{delivery_id}/redeliver`. */
  redeliver(id: string, ctx: RequestContext): Promise<WebhookDeliveryDto> {
    return this.deliveries.redeliver(ctx, id);
  }
}
