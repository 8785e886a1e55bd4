/**
 * Background responses (issue 6, item 2; DESIGN §3 Responses): `POST /v1/responses` with
 * `background: true` stores the Response `in_progress` and enqueues a job in the same
 * transaction; a worker process runs the generation through `InferenceService.generate` (same
 * credit reservation, metering, one activity record and one charge, activity id = response id)
 * and the metering group commit moves the row to its terminal status.
 *
 * Who ends a response, exactly once (every transition is `… WHERE status = 'in_progress'`):
 * - the generation's own record (completed / incomplete / failed), through the group commit;
 * - a cancel (`cancelled`) or the deadline (`failed`, `error.code = "timeout"`), here (`end`). When
 *   a live worker runs the generation, it is aborted through NOTIFY (`abort:<id>=<kind>` on the
 *   cache bus) and records what it generated (charged for it); when none does (queued, or its
 *   worker died), `end` writes the activity record itself, uncharged.
 *
 * Workers claim a response (`runner` = their process id) and heartbeat it every 2 s for as long
 * as its generation runs — also after a cancel or the deadline ended it, until the aborted
 * generation returns and its record is written (at most `ABORTED_HEARTBEAT_MS`). A response in
 * progress whose runner was silent for 10 s (SIGKILL, lost host) is re-enqueued by the reconciler
 * that every worker process runs, as is one unclaimed for 10 s whose job no longer waits in the
 * queue (fetched by a process that died before claiming it): both within 15 s (issue 28, item 3).
 * A re-enqueued job finds its response claimed or ended and does nothing: none runs twice. An
 * ended one with no record whose runner was silent for 30 s gets its record (uncharged) from the
 * reconciler. Deadlines are also enforced by it and lazily by reads, so a missed deadline ends the
 * response even when no worker is running at all.
 *
 * The request is stored with its `metadata.webhook_token` redacted; the token waits in
 * `responses.webhook_token` (never returned by any read) for the record whose outbox row carries
 * it to the deliveries, and is dropped once that record is written.
 */
import { randomUUID } from "node:crypto";
import type { Logger } from "pino";
import { inFlightInsert } from "../../metering/in-flight-activity.js";
import type { JobSender, SqlExecutor } from "../../platform/job-queue.port.js";
import type { DataSource, EntityManager } from "typeorm";
import { v7 as uuidv7 } from "uuid";
import type { CatalogModel } from "../../../config/catalog.js";
import { queryRows } from "../../../db/sql.js";
import type { ActivityStatus } from "../../../entities/activity.entity.js";
import { AppError, ErrorCode, parseUuidParam } from "../../../shared/errors.js";
import type { CacheBus } from "../../platform/cache-bus.js";
import { type Principal, type RequestContext, requirePrincipal } from "../../platform/context.js";
import type { InferenceService } from "../inference.service.js";
import type { MeteringService } from "../../metering/metering.service.js";
import type { ModelCatalogService } from "../../models/model-catalog.service.js";
import {
  type ResponseObject,
  type ResponseRequest,
  answeredTier,
  inProgressResponse,
  responseRequest,
} from "../protocols/openai-responses.protocol.js";
import type { ResponseList, ResponsesService } from "./responses.service.js";
import { createResponse, storedResponse } from "../use-cases/response.js";
import { type StreamStatus, closedStreamError } from "./stream-directory.js";
import {
  redactedMetadata,
  redactedRequest,
  webhookToken,
  withWebhookToken,
} from "../../events/webhooks/webhook-target.js";

/** The background window when `timeout_s` is not given (DESIGN §3: 24 h), seconds. */
export const BACKGROUND_WINDOW_S = 86_400;
/** How often a worker process heartbeats the responses it runs and reconciles, ms. */
export const HEARTBEAT_MS = 2_000;
/** A runner silent this long is taken for dead, seconds. */
export const RUNNER_STALE_S = 10;
/** A response unclaimed this long whose job no longer waits in the queue is re-enqueued, seconds (see `tick`). */
export const UNCLAIMED_S = 10;
/** Job priority of a re-enqueued response: ahead of those accepted after it (the others have 0). */
const RECOVERED_PRIORITY = 1;
/** An ended response whose runner was silent this long (and that has no record) is recorded by the reconciler, seconds. */
export const ENDED_UNRECORDED_S = 30;
/**
 * How long a runner keeps heartbeating a generation it aborted (cancel, deadline) while that
 * generation has not returned, ms. Past it the engine is taken for stuck: the reconciler records
 * the response (uncharged) and the generation's own record, should it ever come, is dropped.
 */
export const ABORTED_HEARTBEAT_MS = 5 * 60_000;

type EndKind = "cancelled" | "timeout";

interface Running {
  controller: AbortController;
  /** Why it was aborted, once it was. */
  endedAs?: EndKind;
  /** When it was aborted (ms since the epoch), once it was. */
  abortedAt?: number;
}

interface EndedRow {
  id: string;
  team_id: string;
  model: string;
  runner: string | null;
  runner_live: boolean;
  principal_json: Principal | null;
  metadata: Record<string, unknown> | null;
  request_json: unknown;
  response_json: ResponseObject;
  created_at: Date;
  /** The request's `metadata.webhook_token`, kept apart from the stored (redacted) request until its record is written. */
  webhook_token: string | null;
}

const TIMEOUT_ERROR = { code: "timeout", message: "The response did not finish before its deadline" };

/**
 * Background responses: create, cancel, DELETE-cancels, reads that apply deadlines, and the
 * worker side (run a job, heartbeat, reconcile). One per process.
 */
export class BackgroundResponsesService {
  /** This process as a runner of background responses. */
  readonly holder = randomUUID();
  private readonly running = new Map<string, Running>();
  private ticker?: NodeJS.Timeout;
  /** Set by `stopWorker`: failures from here on are the shutdown's, not the generation's. */
  private stopping = false;
  private ticks = 0;

  constructor(
    private readonly ds: DataSource,
    private readonly inference: InferenceService,
    private readonly metering: MeteringService,
    private readonly catalog: ModelCatalogService,
    private readonly responses: ResponsesService,
    private readonly bus: CacheBus,
    private readonly jobs: JobSender,
    private readonly logger: Logger,
  ) {
    bus.on("abort", (key) => {
      const [id, kind] = key.split("=");
      this.abortLocal(id, kind === "timeout" ? "timeout" : "cancelled");
    });
  }

  /**
   * Accepts a background response: stores it `in_progress` and, in the same transaction, enqueues
   * its generation and its deadline (`timeout_s`, else 24 h).
   * @returns the stored in-progress Response object.
   * @throws AppError 401; 402 when the team has no credit; 404 when `metadata.stream_id` is another
   *   team's stream; 400 naming `metadata.stream_id` when it is the team's cancelled or archived one;
   *   429 when the model's per-team rate limit is reached (issue 9, item 5); 401/403/429 under the
   *   API key's policy (issue 29, item 1: expired, model not allowed, the key's rpm or tpm).
   */
  async submit(ctx: RequestContext, req: ResponseRequest, raw: unknown, model: CatalogModel): Promise<ResponseObject> {
    const principal = requirePrincipal(ctx);
    // 404 for another team's stream, 400 for a closed one of the team (issue 6, item 4), before
    // anything is stored.
    const type = await this.inference.activityType(principal.teamId, req.metadata, true);
    await this.metering.assertCredit(principal.teamId);
    // The API key's model, expiry and per-minute limits (issue 29, item 1), counted here, not when it runs.
    await this.inference.admitKey(principal, model);
    await this.inference.admitRate(principal.teamId, model);
    const streamId = typeof req.metadata?.stream_id === "string" ? req.metadata.stream_id : null;
    const id = uuidv7();
    const createdAt = new Date();
    const windowS = req.timeout_s ?? BACKGROUND_WINDOW_S;
    const deadline = new Date(createdAt.getTime() + windowS * 1000);
    const object = inProgressResponse(id, createdAt, model.id, answeredTier(req), req.previous_response_id);
    await this.ds.transaction(async (m) => {
      if (streamId) {
        // Checked again under a share lock on the stream row: a PATCH that closes the stream waits
        // for this commit and then cancels this response too, or commits first and refuses it.
        const [stream] = await queryRows<{ status: StreamStatus }>(
          m,
          `SELECT status FROM streams WHERE id = $1 AND team_id = $2 FOR SHARE`,
          [streamId, principal.teamId],
        );
        if (stream && stream.status !== "open") throw closedStreamError(stream.status);
      }
      await m.query(
        `INSERT INTO responses (id, team_id, user_id, api_key_id, model, status, background, stream_id, metadata,
                                request_json, response_json, created_at, deadline_at, principal_json, webhook_token)
         VALUES ($1, $2, $3, $4, $5, 'in_progress', true, $6, $7, $8, $9, $10, $11, $12, $13)`,
        [
          id,
          principal.teamId,
          principal.userId,
          principal.apiKey?.id ?? null,
          model.id,
          streamId,
          // The webhook token is stored apart, never with the request (issue 6, item 3).
          redactedMetadata(req.metadata ?? null),
          redactedRequest(raw),
          object,
          createdAt,
          deadline,
          principal,
          webhookToken(req.metadata),
        ],
      );
      // Its activity row says `pending` from now (DESIGN §3 activity states); the record of its end
      // updates it (services/metering/in-flight-activity.ts).
      await inFlightInsert(m, [
        {
          id,
          principal,
          type,
          status: "pending",
          endpoint: "/v1/responses",
          model: model.id,
          customId: typeof req.metadata?.custom_id === "string" ? req.metadata.custom_id : null,
          streamId,
          serviceTier: answeredTier(req),
          usage: { promptTokens: 0, completionTokens: 0, cachedPromptTokens: 0 },
          costMicros: 0n,
          bodyJson: raw,
          resultJson: null,
          errorJson: null,
          engineMs: null,
          createdAt,
          completedAt: null,
        },
      ]);
      const db = executor(m);
      // pg-boss expires a handler after at most 24 h; the deadline job ends the response anyway.
      await this.jobs.send(
        "response-generate",
        { responseId: id },
        { db, expireInSeconds: Math.min(windowS + 60, 23 * 3600) },
      );
      await this.jobs.send("response-deadline", { responseId: id }, { db, startAfter: deadline });
    });
    return object;
  }

  /**
   * `POST /v1/responses/{id}/cancel`: an in-progress response becomes `cancelled` (a running
   * generation is aborted wherever it runs); an ended one is returned as it is. Never deletes.
   * @throws AppError 400 non-uuid id; 401; 404 unknown or another team's.
   */
  async cancel(ctx: RequestContext, id: unknown): Promise<ResponseObject> {
    const principal = requirePrincipal(ctx);
    const responseId = parseUuidParam("response_id", id);
    const ended = await this.end(responseId, "cancelled", principal.teamId);
    return ended ?? this.get(ctx, responseId);
  }

  /**
   * `DELETE /v1/responses/{id}` (DESIGN §3): an in-progress response is cancelled and kept (the
   * answer shows it `cancelled`); an ended one is deleted and returned as it stood.
   * @throws AppError 400 non-uuid id; 401; 404 unknown or another team's.
   */
  async deleteOrCancel(ctx: RequestContext, id: unknown): Promise<ResponseObject> {
    const principal = requirePrincipal(ctx);
    const responseId = parseUuidParam("response_id", id);
    await this.expireOverdue(principal.teamId, responseId);
    const ended = await this.end(responseId, "cancelled", principal.teamId);
    return ended ?? this.responses.delete(ctx, responseId);
  }

  /**
   * `GET /v1/responses/{id}`, after ending it if its deadline passed (whoever was to run it).
   * @throws as `ResponsesService.get`.
   */
  async get(ctx: RequestContext, id: unknown): Promise<ResponseObject> {
    const principal = requirePrincipal(ctx);
    const responseId = parseUuidParam("response_id", id);
    await this.expireOverdue(principal.teamId, responseId);
    return this.responses.get(ctx, responseId);
  }

  /**
   * `GET /v1/responses`, after ending the team's overdue background responses.
   * @throws as `ResponsesService.list`.
   */
  async list(ctx: RequestContext, query: unknown): Promise<ResponseList> {
    const principal = requirePrincipal(ctx);
    await this.expireOverdue(principal.teamId, null);
    return this.responses.list(ctx, query);
  }

  /**
   * Ends an in-progress response as `cancelled` or `failed`/timeout (no-op when it already ended,
   * or when `teamId` is given and it is another team's).
   * @returns the ended Response object, or null when nothing changed.
   */
  async end(id: string, kind: EndKind, teamId: string | null = null): Promise<ResponseObject | null> {
    const patch = kind === "cancelled" ? { status: "cancelled" } : { status: "failed", error: TIMEOUT_ERROR };
    const [row] = await queryRows<EndedRow>(
      this.ds,
      `UPDATE responses SET status = $2, response_json = response_json || $3::jsonb, completed_at = now(),
                            updated_at = now()
        WHERE id = $1 AND status = 'in_progress' AND ($4::uuid IS NULL OR team_id = $4)
        RETURNING id, team_id, model, runner, principal_json, metadata, request_json, response_json, created_at,
                  webhook_token, (runner IS NOT NULL AND runner_seen_at > now() - make_interval(secs => $5)) AS runner_live`,
      [id, patch.status, JSON.stringify(patch), teamId, RUNNER_STALE_S],
    );
    if (!row) return null;
    if (row.runner_live) {
      // The runner records what it generated (and is charged for it) once aborted.
      if (row.runner === this.holder) this.abortLocal(id, kind);
      else await this.bus.publish("abort", `${id}=${kind}`, this.ds);
    } else {
      await this.recordEnded(
        row,
        kind === "cancelled" ? "cancelled" : "failed",
        kind === "timeout" ? TIMEOUT_ERROR : null,
      );
      // A runner taken for dead may only be late: it stops too (its record then finds one written).
      if (row.runner) await this.bus.publish("abort", `${id}=${kind}`, this.ds).catch(() => undefined);
    }
    return row.response_json;
  }

  /**
   * Worker side of `response-generate`: claims the response and runs its generation. Returns
   * without work when it ended already or a live worker runs it.
   * @throws when the outcome could not be recorded (the claim is released; the queue retries).
   */
  async run(responseId: string): Promise<void> {
    if (this.running.has(responseId)) return;
    const entry: Running = { controller: new AbortController() };
    // Registered before the claim, so an abort that follows the claim always finds it.
    this.running.set(responseId, entry);
    let timer: NodeJS.Timeout | undefined;
    try {
      const [row] = await queryRows<EndedRow & { deadline_at: Date }>(
        this.ds,
        `UPDATE responses SET runner = $2, runner_seen_at = now(), updated_at = now()
          WHERE id = $1 AND background AND status = 'in_progress'
            AND (runner IS NULL OR runner_seen_at < now() - make_interval(secs => $3))
          RETURNING id, team_id, model, runner, principal_json, metadata, request_json, response_json, created_at,
                    webhook_token, deadline_at, true AS runner_live`,
        [responseId, this.holder, RUNNER_STALE_S],
      );
      if (!row) return;
      const remainingMs = row.deadline_at.getTime() - Date.now();
      timer = setTimeout(() => void this.end(responseId, "timeout").catch(() => undefined), Math.max(0, remainingMs));
      try {
        await this.generate(row, entry, Math.max(0, remainingMs));
      } catch (err) {
        if (this.stopping && entry.endedAs === undefined) {
          this.logger.info({ responseId }, "background response left to another worker: this process is stopping");
          return;
        }
        // Refusals before the engine (402, 400) and unexpected errors end the response as failed
        // (a no-op when the generation's own failure record already landed).
        this.logger.debug({ err, responseId }, "background generation failed");
        const code = err instanceof AppError ? err.code : ErrorCode.Internal;
        await this.recordEnded(row, "failed", { code, message: errorMessage(err) });
      }
    } finally {
      clearTimeout(timer);
      this.running.delete(responseId);
    }
    if (this.stopping) return;
    await this.forgetWebhookToken(responseId);
    await this.releaseUnrecorded(responseId);
  }

  /**
   * Drops the webhook token kept apart for a response once its record is written: the outbox row
   * written with that record carries it to the deliveries (and drops it when they end).
   */
  private async forgetWebhookToken(responseId: string): Promise<void> {
    await this.ds.query(
      `UPDATE responses SET webhook_token = NULL
        WHERE id = $1 AND webhook_token IS NOT NULL
          AND EXISTS (SELECT 1 FROM activity WHERE id = $1 AND status IN ('completed', 'failed', 'cancelled'))`,
      [responseId],
    );
  }

  /**
   * A claim of this process on a response still in progress means its outcome was not recorded
   * (the database refused it): the claim is released and the job fails, so the queue retries.
   * @throws Error when that happened.
   */
  private async releaseUnrecorded(responseId: string): Promise<void> {
    const [kept] = await queryRows<{ id: string }>(
      this.ds,
      `UPDATE responses SET runner = NULL, runner_seen_at = NULL
        WHERE id = $1 AND runner = $2 AND status = 'in_progress' RETURNING id`,
      [responseId, this.holder],
    );
    if (kept) throw new Error(`background response ${responseId} was not recorded; released for a retry`);
  }

  /** Runs a claimed response's generation through the Responses create operation (`createResponse`). */
  private async generate(row: EndedRow, entry: Running, remainingMs: number): Promise<void> {
    const req = responseRequest.parse(row.request_json);
    const model = this.catalog.resolve(row.team_id, req.model, "text_generation");
    const tier = answeredTier(req);
    const principal = row.principal_json!;
    // The stored request is redacted; the webhook of its record needs the token kept apart.
    const metadata = withWebhookToken(row.metadata, row.webhook_token);
    await createResponse(
      { inference: this.inference, catalog: this.catalog, background: this, responses: this.responses },
      { requestId: row.id, principal },
      req,
      {
        rawBody: row.request_json,
        signal: entry.controller.signal,
        run: {
          requestId: row.id,
          createdAt: row.created_at,
          metadata,
          // No 429 for background work: it waits for a slot until its deadline.
          maxQueueWaitS: Math.max(1, remainingMs / 1000),
          end: (object) =>
            entry.endedAs === "timeout"
              ? { object: { ...object, status: "failed", error: TIMEOUT_ERROR }, status: "failed" }
              : { object },
          onFailure: (err) => {
            // A process stopping (its engines closing under the generation) records nothing: the
            // response stays in progress under this silent runner and another worker resumes it,
            // as after a SIGKILL.
            if (this.stopping && entry.endedAs === undefined) return null;
            const kind = entry.endedAs;
            const error =
              kind === "timeout"
                ? TIMEOUT_ERROR
                : { code: err instanceof AppError ? err.code : ErrorCode.Internal, message: errorMessage(err) };
            const status = kind === "cancelled" ? "cancelled" : "failed";
            const object: ResponseObject = {
              ...inProgressResponse(row.id, row.created_at, model.id, tier, req.previous_response_id),
              status,
              error: kind === "cancelled" ? null : error,
            };
            return {
              status,
              errorJson: kind === "cancelled" ? null : error,
              response: storedResponse(object, true, metadata, row.request_json),
            };
          },
        },
      },
    );
  }

  /** The activity record (uncharged) of a response that ended without a generation recording it. */
  private async recordEnded(
    row: EndedRow,
    status: ActivityStatus,
    error: { code: string; message: string } | null,
  ): Promise<void> {
    const principal = row.principal_json;
    if (!principal) return;
    const current = row.response_json;
    const object: ResponseObject = { ...current, status: status === "cancelled" ? "cancelled" : "failed", error };
    await this.metering.record({
      id: row.id,
      principal,
      type: await this.inference.activityType(principal.teamId, row.metadata).catch(() => "standalone" as const),
      status,
      endpoint: "/v1/responses",
      model: row.model,
      customId: typeof row.metadata?.custom_id === "string" ? row.metadata.custom_id : null,
      streamId: typeof row.metadata?.stream_id === "string" ? row.metadata.stream_id : null,
      usage: { promptTokens: 0, completionTokens: 0, cachedPromptTokens: 0 },
      costMicros: 0n,
      bodyJson: row.request_json,
      resultJson: null,
      errorJson: error,
      engineMs: null,
      createdAt: row.created_at,
      completedAt: new Date(),
      response: {
        status: object.status,
        background: true,
        // Its webhook (derived from this metadata) needs the token kept apart; stored redacted.
        metadata: withWebhookToken(row.metadata, row.webhook_token),
        requestJson: row.request_json,
        responseJson: { ...object },
      },
    });
    await this.forgetWebhookToken(row.id);
  }

  private abortLocal(id: string, kind: EndKind): void {
    const entry = this.running.get(id);
    if (!entry || entry.controller.signal.aborted) return;
    entry.endedAs = kind;
    entry.abortedAt = Date.now();
    const detail = kind === "timeout" ? TIMEOUT_ERROR.message : "The response was cancelled";
    entry.controller.abort(new AppError(ErrorCode.ClientClosed, detail));
  }

  /** Ends the team's in-progress responses (or just `id`) whose deadline passed. */
  private async expireOverdue(teamId: string, id: string | null): Promise<void> {
    const rows = await queryRows<{ id: string }>(
      this.ds,
      `SELECT id FROM responses
        WHERE status = 'in_progress' AND deadline_at < now() AND team_id = $1 AND ($2::uuid IS NULL OR id = $2)
        LIMIT 100`,
      [teamId, id],
    );
    for (const r of rows) await this.end(r.id, "timeout");
  }

  /**
   * Worker processes: heartbeats this process's running responses and reconciles every
   * `HEARTBEAT_MS` (and once now): overdue responses end as timed out, responses of silent
   * runners are re-enqueued, ended responses that never got their activity record get it.
   */
  startWorker(): void {
    const tick = () =>
      void this.tick().catch((err: unknown) => this.logger.warn({ err }, "background reconciler failed"));
    tick();
    this.ticker = setInterval(tick, HEARTBEAT_MS);
    this.ticker.unref();
  }

  /**
   * Stops heartbeats and reconciling. Runs after the job queue's stop (which waits for running
   * generations, heartbeating them meanwhile); generations still running after that are left
   * unrecorded under this silent runner, so another worker resumes them (issue 6, item 2).
   */
  stopWorker(): void {
    this.stopping = true;
    clearInterval(this.ticker);
    this.ticker = undefined;
  }

  private async tick(): Promise<void> {
    // Every generation this process still runs, ended or not: a cancelled or timed-out one was
    // aborted but records what it generated only when it returns, and until then the reconciler
    // must not take its runner for dead and write an uncharged record in its place.
    const now = Date.now();
    const live = [...this.running]
      .filter(([, r]) => r.abortedAt === undefined || now - r.abortedAt < ABORTED_HEARTBEAT_MS)
      .map(([id]) => id);
    if (live.length > 0) {
      const rows = await queryRows<{ id: string; status: string; error_code: string | null }>(
        this.ds,
        `UPDATE responses SET runner_seen_at = now() WHERE runner = $1 AND id = ANY($2::uuid[])
          RETURNING id, status, response_json -> 'error' ->> 'code' AS error_code`,
        [this.holder, live],
      );
      // An end whose abort NOTIFY never arrived (the listener was reconnecting) is acted on here.
      for (const r of rows) {
        if (r.status !== "in_progress" && this.running.get(r.id)?.endedAs === undefined) {
          this.abortLocal(r.id, r.error_code === "timeout" ? "timeout" : "cancelled");
        }
      }
    }
    const overdue = await queryRows<{ id: string }>(
      this.ds,
      "SELECT id FROM responses WHERE status = 'in_progress' AND deadline_at < now() LIMIT 100",
    );
    for (const r of overdue) await this.end(r.id, "timeout");
    await this.ds.transaction(async (m) => {
      const orphans = await queryRows<{ id: string }>(
        m,
        `UPDATE responses SET runner = NULL, runner_seen_at = NULL, updated_at = now()
          WHERE id IN (SELECT r.id FROM responses r
                        WHERE r.status = 'in_progress'
                          AND ((r.runner IS NOT NULL AND r.runner_seen_at < now() - make_interval(secs => $1))
                               -- unclaimed, its job no longer waiting: fetched by a process that died
                               -- before claiming it (a live fetch claims within ms; its twin no-ops).
                               OR (r.runner IS NULL AND r.updated_at < now() - make_interval(secs => $2)
                                   AND NOT ${this.jobs.waitingSql("response-generate", "responseId", "r.id::text")}))
                        LIMIT 100 FOR UPDATE SKIP LOCKED)
          RETURNING id`,
        [RUNNER_STALE_S, UNCLAIMED_S],
      );
      for (const o of orphans) {
        this.logger.info({ responseId: o.id }, "re-enqueueing a background response whose worker went silent");
        const options = { db: executor(m), priority: RECOVERED_PRIORITY };
        await this.jobs.send("response-generate", { responseId: o.id }, options);
      }
    });
    if (this.ticks++ % 5 === 0) await this.recordUnrecorded();
  }

  /** Ended background responses without an activity record whose runner is gone (it died before recording). */
  private async recordUnrecorded(): Promise<void> {
    const rows = await queryRows<EndedRow>(
      this.ds,
      `SELECT r.id, r.team_id, r.model, r.runner, r.principal_json, r.metadata, r.request_json, r.response_json,
              r.created_at, r.webhook_token, false AS runner_live
         FROM responses r
        WHERE r.background AND r.status <> 'in_progress'
          AND r.updated_at BETWEEN now() - interval '1 day' AND now() - make_interval(secs => $1)
          AND (r.runner IS NULL OR r.runner_seen_at < now() - make_interval(secs => $1))
          -- Its row from the create (\`pending\`/\`running\`) is not a record of its end.
          AND NOT EXISTS (SELECT 1 FROM activity a WHERE a.id = r.id AND a.status IN ('completed', 'failed', 'cancelled'))
        LIMIT 100`,
      [ENDED_UNRECORDED_S],
    );
    for (const row of rows) {
      const error = row.response_json.error;
      await this.recordEnded(row, row.response_json.status === "cancelled" ? "cancelled" : "failed", error);
    }
  }
}

function executor(m: EntityManager): SqlExecutor {
  return (text, values) => queryRows<Record<string, unknown>>(m, text, values);
}

function errorMessage(err: unknown): string {
  return err instanceof AppError ? err.detail : "Internal error";
}
