/**
 * GraphQL types of the webhook delivery log (issue 27, item 6): a delivery with its attempts under
 * the REST field names in camelCase (`GET /control/v1/webhooks/deliveries`).
 */
import { Field, ID, Int, ObjectType } from "type-graphql";
import type {
  DeliveryStatus,
  WebhookAttemptDto,
  WebhookDeliveryDto,
  WebhookDeliveryPageDto,
} from "../services/events/webhooks/webhook-deliveries.service.js";

@ObjectType("WebhookAttempt", { description: "One attempt to send a completion webhook." })
export class WebhookAttemptType implements WebhookAttemptDto {
  @Field(() => Int, { description: "1, 2, … across the first sending and every redelivery." }) attempt!: number;
  @Field({ description: "When it ended, ISO 8601." }) at!: string;
  @Field(() => Int, {
    name: "statusCode",
    nullable: true,
    description: "The receiver's HTTP status; null when none came (refused address, DNS, connect, timeout).",
  })
  status_code!: number | null;
  @Field(() => String, {
    nullable: true,
    description: 'Why it failed (e.g. "HTTP 500", "refused: private address (loopback); set …"); null when delivered.',
  })
  error!: string | null;
  @Field(() => Int, { name: "latencyMs" }) latency_ms!: number;
}

@ObjectType("WebhookDelivery", { description: "A completion webhook's delivery and its attempts, oldest first." })
export class WebhookDeliveryType implements WebhookDeliveryDto {
  @Field(() => ID) id!: string;
  object!: "webhook_delivery";
  @Field(() => ID, { name: "responseId", description: "The request whose end it announces." }) response_id!: string;
  @Field() url!: string;
  @Field(() => String, { description: "pending, delivered or failed." }) status!: DeliveryStatus;
  @Field(() => String, { name: "lastError", nullable: true }) last_error!: string | null;
  @Field({ name: "createdAt", description: "ISO 8601." }) created_at!: string;
  @Field({ name: "updatedAt", description: "ISO 8601." }) updated_at!: string;
  @Field(() => String, {
    name: "nextAttemptAt",
    nullable: true,
    description: "When the next attempt is due (pending).",
  })
  next_attempt_at!: string | null;
  @Field(() => String, { name: "finishedAt", nullable: true }) finished_at!: string | null;
  @Field({ description: "True when redeliverWebhook can send it again (failed, its body still kept)." })
  redeliverable!: boolean;
  @Field(() => String, { name: "redeliverableUntil", nullable: true }) redeliverable_until!: string | null;
  @Field(() => [WebhookAttemptType]) attempts!: WebhookAttemptDto[];
}

@ObjectType("WebhookDeliveryPage", { description: "Newest first; pass nextStartingAfter for the next page." })
export class WebhookDeliveryPageType implements WebhookDeliveryPageDto {
  @Field(() => [WebhookDeliveryType]) items!: WebhookDeliveryDto[];
  @Field(() => String, { name: "nextStartingAfter", nullable: true }) next_starting_after!: string | null;
}
