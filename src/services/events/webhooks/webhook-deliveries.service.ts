/**
 * The webhook delivery log and manual redelivery (issue 27, item 6): what became of each
 * completion webhook of the caller's team — its status, every attempt (time, HTTP status or error,
 * latency), a refused address included ("refused: private address (loopback); set
 * SWITCHYARD_WEBHOOK_ALLOW_PRIVATE=true to allow") — read from `webhook_deliveries` and
 * `webhook_attempts`, which the dispatcher (`webhook-dispatcher.ts`) writes. REST
 * (`/control/v1/webhooks/deliveries…`) and GraphQL (`webhookDeliveries`, `webhookDelivery`,
 * `redeliverWebhook`) call these methods.
 *
 * Rules:
 * - Who: every member of the team reads its deliveries (`webhooks.read`); owners and admins
 *   redeliver (`webhooks.redeliver`; policy.ts). Another team's delivery is 404, never 403.
 * - List: newest first (`created_at DESC, id DESC`), `limit` 1–100 (default 25), `starting_after`
 *   a delivery id of the caller's team (else 400 naming it, the same for unknown and another
 *   team's, so ids cannot be probed); `next_starting_after` is the last item's id, or null on the
 *   last page (the billing transactions' paging). Filters: `response_id`, `status`.
 * - The webhook token is never answered; the URL is (the request that named it is the team's).
 */
import type { DataSource } from "typeorm";
import { z } from "zod";
import { type Queryable, queryRows } from "../../../db/sql.js";
import { AppError, parseInput, parseUuidParam } from "../../../shared/errors.js";
import type { CacheBus } from "../../platform/cache-bus.js";
import type { RequestContext } from "../../platform/context.js";
import { authorize } from "../../platform/policy.js";
import { optionalQuery, queryInt } from "../../platform/validation.js";
import type { TokenSealer } from "./webhook-dispatcher.js";

export const DELIVERY_STATUSES = ["pending", "delivered", "failed"] as const;
export type DeliveryStatus = (typeof DELIVERY_STATUSES)[number];

/** `GET /control/v1/webhooks/deliveries` query. */
export const deliveryListQuery = z.object({
  limit: optionalQuery(queryInt(1, 100)),
  starting_after: optionalQuery(z.uuid()),
  response_id: optionalQuery(z.uuid()),
  status: optionalQuery(z.enum(DELIVERY_STATUSES)),
});

/** One attempt to send a delivery. */
export interface WebhookAttemptDto {
  /** 1, 2, … across the first sending and every redelivery. */
  attempt: number;
  /** When it ended, ISO 8601. */
  at: string;
  /** The receiver's HTTP status; null when none came (refused address, DNS, connect, timeout). */
  status_code: number | null;
  /** Why it failed (`HTTP 500`, `ECONNREFUSED`, `refused: private address …`); null when delivered. */
  error: string | null;
  latency_ms: number;
}

/** A completion webhook's delivery with its attempts, oldest attempt first. */
export interface WebhookDeliveryDto {
  id: string;
  object: "webhook_delivery";
  /** The request (response, chat completion, message …) whose end it announces. */
  response_id: string;
  url: string;
  status: DeliveryStatus;
  /** The latest attempt's error (null once delivered). */
  last_error: string | null;
  created_at: string;
  updated_at: string;
  /** When the next attempt is due (pending only). */
  next_attempt_at: string | null;
  finished_at: string | null;
  /** True when `POST …/redeliver` can send it again (a failed delivery whose body is still kept). */
  redeliverable: boolean;
  /** Until when it stays redeliverable (null when it is not). */
  redeliverable_until: string | null;
  attempts: WebhookAttemptDto[];
}

/** `GET /control/v1/webhooks/deliveries` answer. */
export interface WebhookDeliveryPageDto {
  items: WebhookDeliveryDto[];
  next_starting_after: string | null;
}

interface DeliveryRow {
  id: string;
  response_id: string;
  url: string;
  status: DeliveryStatus;
  last_error: string | null;
  created_at: Date;
  updated_at: Date;
  next_attempt_at: Date;
  finished_at: Date | null;
  kept_until: Date | null;
}

interface AttemptRow {
  delivery_id: string;
  attempt: number;
  at: Date;
  status_code: number | null;
  error: string | null;
  latency_ms: number;
}

const COLUMNS = `d.id, d.response_id, d.url, d.status, d.last_error, d.created_at, d.updated_at, d.next_attempt_at,
  d.finished_at, d.kept_until`;

/** Reads the team's webhook deliveries and redelivers failed ones. */
export class WebhookDeliveriesService {
  constructor(
    private readonly ds: DataSource,
    private readonly bus: CacheBus,
    /** Opens the tokens the dispatcher sealed (the same key: `WEBHOOK_TOKEN_PURPOSE`). */
    private readonly sealer: TokenSealer,
  ) {}

  /**
   * A page of the team's deliveries, newest first, with their attempts.
   * @throws AppError 400 naming a bad query field or a `starting_after` that is not a delivery of
   *   the caller's team; 401.
   */
  async list(ctx: RequestContext, query: unknown): Promise<WebhookDeliveryPageDto> {
    const principal = authorize(ctx, "webhooks.read");
    const q = parseInput(deliveryListQuery, query ?? {});
    const limit = q.limit ?? 25;
    if (q.starting_after) {
      const [cursor] = await queryRows(this.ds, "SELECT 1 FROM webhook_deliveries WHERE id = $1 AND team_id = $2", [
        q.starting_after,
        principal.teamId,
      ]);
      if (!cursor) {
        throw AppError.invalid("Invalid request: starting_after", [
          { field: "starting_after", message: "is not a webhook delivery of your team" },
        ]);
      }
    }
    const rows = await queryRows<DeliveryRow>(
      this.ds,
      `SELECT ${COLUMNS} FROM webhook_deliveries d
        WHERE d.team_id = $1 AND ($2::uuid IS NULL OR d.response_id = $2) AND ($3::text IS NULL OR d.status = $3)
          AND ($4::uuid IS NULL
               OR (d.created_at, d.id) < (SELECT created_at, id FROM webhook_deliveries WHERE id = $4::uuid))
        ORDER BY d.created_at DESC, d.id DESC
        LIMIT $5`,
      [principal.teamId, q.response_id ?? null, q.status ?? null, q.starting_after ?? null, limit + 1],
    );
    const items = await this.withAttempts(this.ds, rows.slice(0, limit));
    return { items, next_starting_after: rows.length > limit ? items[items.length - 1].id : null };
  }

  /**
   * One delivery of the team with its attempts.
   * @throws AppError 400 when `id` is not a uuid (naming `delivery_id`); 401; 404 when it does not
   *   exist or is another team's.
   */
  async get(ctx: RequestContext, id: unknown): Promise<WebhookDeliveryDto> {
    const principal = authorize(ctx, "webhooks.read");
    return this.teamDelivery(this.ds, principal.teamId, parseUuidParam("delivery_id", id));
  }

  /**
   * Sends a failed delivery again: the same row goes back to `pending`, due now, with a fresh
   * retry schedule, and the dispatcher sends it as it sends every delivery (same claim, signing,
   * SSRF guard and attempt records; the attempts so far stay and the new ones number on).
   *
   * Why a reset and not a new delivery: one delivery per response is the outbox's dedup key
   * (`webhook_deliveries.response_id` is unique, so the group commit can never write a callback
   * twice), and one row per response keeps the whole story of a callback in one log entry.
   *
   * What it sends: the body and webhook token the delivery carried. A failed delivery keeps them
   * for a limited time (`KEEP_FAILED_MS`, 7 days, shorter with `SWITCHYARD_BODY_RETENTION_DAYS`),
   * the token sealed under a key derived from the service secret, and never for a team with zero
   * data retention; the signature is made afresh with the team's current signing secret.
   * @returns the delivery, now `pending`.
   * @throws AppError 400 (`delivery_id` not a uuid); 401; 403 for members; 404 when it does not
   *   exist or is another team's; 409 when it is pending or delivered, when its body is no longer
   *   kept, or when its sealed token cannot be opened (the service secret changed).
   */
  async redeliver(ctx: RequestContext, id: unknown): Promise<WebhookDeliveryDto> {
    const principal = authorize(ctx, "webhooks.redeliver");
    const deliveryId = parseUuidParam("delivery_id", id);
    return this.ds.transaction(async (m) => {
      const [row] = await queryRows<{
        team_id: string;
        status: DeliveryStatus;
        token_sealed: Buffer | null;
        kept: boolean;
      }>(
        m,
        `SELECT team_id, status, token_sealed, coalesce(kept_until > now(), false) AS kept
           FROM webhook_deliveries WHERE id = $1 FOR UPDATE`,
        [deliveryId],
      );
      if (!row || row.team_id !== principal.teamId) throw AppError.notFound("Webhook delivery not found");
      if (row.status === "pending") {
        throw AppError.conflict("The delivery is pending: it is being sent or waits for its next attempt");
      }
      if (row.status === "delivered")
        throw AppError.conflict("The delivery was delivered; only failed ones are sent again");
      if (!row.kept) {
        throw AppError.conflict(
          "The delivery can no longer be redelivered: a failed delivery keeps its body and webhook token for 7 days " +
            "(less with SWITCHYARD_BODY_RETENTION_DAYS), and none under zero data retention; make the request again",
        );
      }
      let token: string | null = null;
      if (row.token_sealed) {
        try {
          token = this.sealer.open(row.token_sealed, deliveryId);
        } catch {
          throw AppError.conflict(
            "The delivery's webhook token can no longer be read (SWITCHYARD_JWT_SECRET changed since it was kept); " +
              "make the request again",
          );
        }
      }
      await m.query(
        `UPDATE webhook_deliveries
            SET status = 'pending', attempts_before = attempts, next_attempt_at = now(), token = $2,
                token_sealed = NULL, kept_until = NULL, finished_at = NULL, updated_at = now()
          WHERE id = $1`,
        [deliveryId, token],
      );
      // Wakes the dispatchers when this commits.
      await this.bus.publish("webhook", "", m);
      return this.teamDelivery(m, principal.teamId, deliveryId);
    });
  }

  private async teamDelivery(db: Queryable, teamId: string, id: string): Promise<WebhookDeliveryDto> {
    const rows = await queryRows<DeliveryRow>(
      db,
      `SELECT ${COLUMNS} FROM webhook_deliveries d WHERE d.id = $1 AND d.team_id = $2`,
      [id, teamId],
    );
    if (rows.length === 0) throw AppError.notFound("Webhook delivery not found");
    return (await this.withAttempts(db, rows))[0];
  }

  private async withAttempts(db: Queryable, rows: DeliveryRow[]): Promise<WebhookDeliveryDto[]> {
    const attempts = rows.length
      ? await queryRows<AttemptRow>(
          db,
          `SELECT delivery_id, attempt, at, status_code, error, latency_ms FROM webhook_attempts
            WHERE delivery_id = ANY($1::uuid[]) ORDER BY delivery_id, attempt`,
          [rows.map((r) => r.id)],
        )
      : [];
    const byDelivery = new Map<string, WebhookAttemptDto[]>();
    for (const a of attempts) {
      const list = byDelivery.get(a.delivery_id) ?? [];
      list.push({
        attempt: a.attempt,
        at: a.at.toISOString(),
        status_code: a.status_code,
        error: a.error,
        latency_ms: a.latency_ms,
      });
      byDelivery.set(a.delivery_id, list);
    }
    return rows.map((r) => deliveryJson(r, byDelivery.get(r.id) ?? []));
  }
}

function deliveryJson(r: DeliveryRow, attempts: WebhookAttemptDto[]): WebhookDeliveryDto {
  const redeliverable = r.status === "failed" && r.kept_until !== null && r.kept_until.getTime() > Date.now();
  return {
    id: r.id,
    object: "webhook_delivery",
    response_id: r.response_id,
    url: r.url,
    status: r.status,
    last_error: r.last_error,
    created_at: r.created_at.toISOString(),
    updated_at: r.updated_at.toISOString(),
    next_attempt_at: r.status === "pending" ? r.next_attempt_at.toISOString() : null,
    finished_at: r.finished_at?.toISOString() ?? null,
    redeliverable,
    redeliverable_until: redeliverable ? r.kept_until!.toISOString() : null,
    attempts,
  };
}
