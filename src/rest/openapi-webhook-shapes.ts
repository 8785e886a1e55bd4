/**
 * Zod shapes of the webhook delivery log (issue 27, item 6) for the OpenAPI document; held to the
 * service's answer at compile time (`Fits`) and to the real answers by
 * test/openapi-operations.test.ts.
 */
import { z } from "zod";
import type { WebhookDeliveryDto } from "../services/events/webhooks/webhook-deliveries.service.js";
import { type Fits, int } from "./openapi-fits.js";

const time = () => z.string().meta({ description: "ISO 8601 date-time" });

/** One attempt to send a delivery. */
export const webhookAttemptShape = z.object({
  attempt: int().meta({ description: "1, 2, … across the first sending and every redelivery" }),
  at: time(),
  status_code: int()
    .nullable()
    .meta({ description: "the receiver's HTTP status; null when none came (refused address, DNS, connect, timeout)" }),
  error: z
    .string()
    .nullable()
    .meta({
      description:
        'why it failed, e.g. "HTTP 500", "ECONNREFUSED", "refused: private address (loopback); set ' +
        'SWITCHYARD_WEBHOOK_ALLOW_PRIVATE=true to allow"; null when delivered',
    }),
  latency_ms: int(),
});

/** A completion webhook's delivery with its attempts (oldest first). */
export const webhookDeliveryShape = z.object({
  id: z.string().meta({ description: "uuid" }),
  object: z.literal("webhook_delivery"),
  response_id: z.string().meta({ description: "uuid of the request whose end it announces" }),
  url: z.string(),
  status: z.enum(["pending", "delivered", "failed"]),
  last_error: z.string().nullable(),
  created_at: time(),
  updated_at: time(),
  next_attempt_at: time().nullable().meta({ description: "when the next attempt is due (pending only)" }),
  finished_at: time().nullable(),
  redeliverable: z.boolean().meta({ description: "POST …/redeliver can send it again" }),
  redeliverable_until: time().nullable(),
  attempts: z.array(webhookAttemptShape),
});
export type WebhookDeliveryFits = Fits<WebhookDeliveryDto, z.output<typeof webhookDeliveryShape>>;

/** A page of deliveries, newest first. */
export const webhookDeliveryListShape = z.object({
  items: z.array(webhookDeliveryShape),
  next_starting_after: z.string().nullable(),
});
