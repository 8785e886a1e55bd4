/**
 * What the metering group commit records about one finished request (`MeteringService.record`),
 * shared by the service and its row builders (`metering-rows.ts`).
 */
import type { ActivityStatus, ActivityType } from "../../entities/activity.entity.js";
import type { TokenUsage } from "../../shared/money.js";
import type { WebhookRequest } from "../events/webhooks/webhook-target.js";
import type { Principal } from "../platform/context.js";

/** A Response object to store with its request (`store: true`). */
export interface StoredResponse {
  status: string;
  background: boolean;
  metadata: Record<string, unknown> | null;
  requestJson: unknown;
  responseJson: Record<string, unknown>;
}

/** Everything recorded about one finished request. */
export interface UsageRecord {
  /** The request id: activity id, ledger source, response id. */
  id: string;
  principal: Principal;
  type: ActivityType;
  status: ActivityStatus;
  /** e.g. `/v1/chat/completions`. */
  endpoint: string;
  model: string;
  customId: string | null;
  streamId: string | null;
  /** The batch of a batch item (issue 7). */
  batchId?: string | null;
  /** The tier the request was served at (`default` when absent; `flex` for Responses that asked for it). */
  serviceTier?: "default" | "flex";
  usage: TokenUsage;
  /** Charge in micro-USD (≥ 0). */
  costMicros: bigint;
  bodyJson: unknown;
  resultJson: unknown;
  errorJson: unknown;
  engineMs: number | null;
  createdAt: Date;
  completedAt: Date | null;
  response?: StoredResponse;
  /**
   * The completion webhook to deliver with this record (issue 6, item 3): written to the outbox
   * in the same transaction, and only when the record's activity row is new. When absent, a record
   * whose stored Response reached a terminal status and names a usable `completion_webhook` in its
   * metadata delivers that Response (so background terminal records fire too); null: none.
   */
  webhook?: WebhookRequest | null;
}
