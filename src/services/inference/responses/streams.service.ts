/**
 * Streams (issue 6, item 4; DESIGN §3 "Streams"): a team's named groups of requests. A request
 * joins a stream through `metadata.stream_id`; a stream's counters are computed from the activity
 * rows of its finished requests plus its unfinished background responses, so nothing is kept in
 * step with the metering path. `StreamDirectory` (`stream-directory.ts`) answers which team owns
 * a stream id.
 */
import type { DataSource } from "typeorm";
import { v7 as uuidv7 } from "uuid";
import { z } from "zod";
import { queryRows } from "../../../db/sql.js";
import { AppError, parseInput, parseUuidParam } from "../../../shared/errors.js";
import type { BackgroundResponsesService } from "./background-responses.service.js";
import { type RequestContext, requirePrincipal } from "../../platform/context.js";
import type { StreamDirectory } from "./stream-directory.js";
import { pgText } from "../../platform/validation.js";

/** A stream as list and create answer it (times ISO 8601). */
export interface StreamSummary {
  id: string;
  name: string;
  window: "24h";
  status: "open" | "archived" | "cancelled";
  created_at: string;
  updated_at: string;
}

/** `GET /v1/streams/{id}`: the summary, its state times and its counters (DESIGN §3 Streams). */
export interface StreamDetail extends StreamSummary {
  cancelled_at: string | null;
  archived_at: string | null;
  total_items: number;
  pending_items: number;
  running_items: number;
  /** `incomplete` responses count as completed. */
  completed_items: number;
  failed_items: number;
  cancelled_items: number;
  /** (completed + failed + cancelled) / total; 0 for an empty stream. */
  completion_ratio: number;
  total_prompt_tokens: number;
  total_completion_tokens: number;
  total_tokens: number;
  /** Micro-USD. */
  total_cost_micros: number;
  last_completion_at: string | null;
  latest_completion_id: string | null;
}

/** `POST /v1/streams` body. */
export const createStreamInput = z.object({
  name: pgText().min(1).max(256),
  window: z.literal("24h").optional(),
});

/** `PATCH /v1/streams/{id}` body. */
export const updateStreamInput = z.object({
  name: pgText().min(1).max(256).optional(),
  status: z.enum(["archived", "cancelled"]).optional(),
});

interface StreamRow {
  id: string;
  name: string;
  window: "24h";
  status: StreamSummary["status"];
  created_at: Date;
  updated_at: Date;
  cancelled_at: Date | null;
  archived_at: Date | null;
}

const STREAM_COLUMNS = `id, name, "window", status, created_at, updated_at, cancelled_at, archived_at`;

function toSummary(r: StreamRow): StreamSummary {
  return {
    id: r.id,
    name: r.name,
    window: r.window,
    status: r.status,
    created_at: r.created_at.toISOString(),
    updated_at: r.updated_at.toISOString(),
  };
}

interface CountersRow {
  pending: number;
  running: number;
  completed: number;
  failed: number;
  cancelled: number;
  prompt_tokens: string;
  completion_tokens: string;
  total_tokens: string;
  cost_micros: string;
  last_completion_at: Date | null;
  latest_completion_id: string | null;
}

/** Whether activity row `a` is a background response still in progress (its counters come from `responses`). */
const OPEN_BACKGROUND = `EXISTS (SELECT FROM responses r WHERE r.id = a.id AND r.background AND r.status = 'in_progress')`;

/**
 * `POST/GET /v1/streams`, `GET/PATCH /v1/streams/{id}` (issue 6, item 4), for REST and GraphQL.
 * Every read and write is scoped to the caller's team: another team's stream is a 404.
 */

export class StreamsService {
  constructor(
    private readonly ds: DataSource,
    private readonly directory: StreamDirectory,
    private readonly background: BackgroundResponsesService,
  ) {}

  /**
   * Creates an `open` stream with a UUIDv7 id.
   * @throws AppError 400 (`name` 1–256 storable characters, `window` only `24h`), 401.
   */
  async create(ctx: RequestContext, body: unknown): Promise<StreamSummary> {
    const principal = requirePrincipal(ctx);
    const input = parseInput(createStreamInput, body);
    const [row] = await queryRows<StreamRow>(
      this.ds,
      `INSERT INTO streams (id, team_id, name, "window") VALUES ($1, $2, $3, $4) RETURNING ${STREAM_COLUMNS}`,
      [uuidv7(), principal.teamId, input.name, input.window ?? "24h"],
    );
    this.directory.remember(row.id, principal.teamId);
    return toSummary(row);
  }

  /** The team's streams, newest first. @throws AppError 401. */
  async list(ctx: RequestContext): Promise<{ items: StreamSummary[] }> {
    const principal = requirePrincipal(ctx);
    const rows = await queryRows<StreamRow>(
      this.ds,
      `SELECT ${STREAM_COLUMNS} FROM streams WHERE team_id = $1 ORDER BY id DESC`,
      [principal.teamId],
    );
    return { items: rows.map(toSummary) };
  }

  /**
   * The team's streams among `ids`, in the order asked: null for an id that is no stream of the
   * team (a label, or another team's). One query however many ids (GraphQL's per-request stream
   * loader batches a page's lookups into one call). Ids must be UUIDs (event and response stream ids are).
   * @throws AppError 401.
   */
  async summaries(ctx: RequestContext, ids: readonly string[]): Promise<Array<StreamSummary | null>> {
    const principal = requirePrincipal(ctx);
    const rows = await queryRows<StreamRow>(
      this.ds,
      `SELECT ${STREAM_COLUMNS} FROM streams WHERE team_id = $1 AND id = ANY($2::uuid[])`,
      [principal.teamId, [...new Set(ids)]],
    );
    const byId = new Map(rows.map((r) => [r.id, toSummary(r)]));
    return ids.map((id) => byId.get(id) ?? null);
  }

  /**
   * One stream with its counters: finished requests from activity, unfinished background
   * responses (`pending` before a runner claims it, `running` after) from responses.
   * @throws AppError 400 non-uuid id; 401; 404 unknown or another team's.
   */
  async get(ctx: RequestContext, id: unknown): Promise<StreamDetail> {
    const principal = requirePrincipal(ctx);
    const streamId = parseUuidParam("stream_id", id);
    const row = await this.row(principal.teamId, streamId);
    const [c] = await queryRows<CountersRow>(
      this.ds,
      `WITH done AS (
         SELECT count(*) FILTER (WHERE status = 'completed')::int AS completed,
                count(*) FILTER (WHERE status = 'failed')::int AS failed,
                count(*) FILTER (WHERE status = 'cancelled')::int AS cancelled,
                -- In flight (services/metering/in-flight-activity.ts); an open background response is counted
                -- from \`responses\` below, whose runner says whether it runs. The lookup runs for
                -- rows in flight only, not for every ended row of the stream.
                count(*) FILTER (WHERE status = 'pending' AND NOT ${OPEN_BACKGROUND})::int AS pending_a,
                count(*) FILTER (WHERE status = 'running' AND NOT ${OPEN_BACKGROUND})::int AS running_a,
                coalesce(sum(prompt_tokens), 0)::text AS prompt_tokens,
                coalesce(sum(completion_tokens), 0)::text AS completion_tokens,
                coalesce(sum(total_tokens), 0)::text AS total_tokens,
                coalesce(sum(cost_micros), 0)::text AS cost_micros,
                max(completed_at) AS last_completion_at
           FROM activity a WHERE a.team_id = $1 AND a.stream_id = $2),
       open AS (
         SELECT count(*) FILTER (WHERE runner IS NULL)::int AS pending,
                count(*) FILTER (WHERE runner IS NOT NULL)::int AS running
           FROM responses WHERE team_id = $1 AND stream_id = $2 AND status = 'in_progress'),
       latest AS (
         SELECT completion_id FROM completion_events WHERE team_id = $1 AND stream_id = $2
          ORDER BY position DESC LIMIT 1)
       SELECT open.pending + done.pending_a AS pending, open.running + done.running_a AS running,
              done.completed, done.failed, done.cancelled, done.prompt_tokens, done.completion_tokens,
              done.total_tokens, done.cost_micros, done.last_completion_at,
              (SELECT completion_id FROM latest) AS latest_completion_id
         FROM done, open`,
      [principal.teamId, streamId],
    );
    const total = c.pending + c.running + c.completed + c.failed + c.cancelled;
    const finished = c.completed + c.failed + c.cancelled;
    return {
      ...toSummary(row),
      cancelled_at: row.cancelled_at?.toISOString() ?? null,
      archived_at: row.archived_at?.toISOString() ?? null,
      total_items: total,
      pending_items: c.pending,
      running_items: c.running,
      completed_items: c.completed,
      failed_items: c.failed,
      cancelled_items: c.cancelled,
      completion_ratio: total === 0 ? 0 : finished / total,
      total_prompt_tokens: Number(c.prompt_tokens),
      total_completion_tokens: Number(c.completion_tokens),
      total_tokens: Number(c.total_tokens),
      total_cost_micros: Number(c.cost_micros),
      last_completion_at: c.last_completion_at?.toISOString() ?? null,
      latest_completion_id: c.latest_completion_id,
    };
  }

  /**
   * Renames and/or archives or cancels a stream. Cancelling cancels every unfinished background
   * response of the stream (through `BackgroundResponsesService.end`, as `POST
   * /v1/responses/{id}/cancel` does) and sets `cancelled_at`; archiving sets `archived_at`. Either
   * way the stream takes no new requests (`StreamDirectory`); accepted ones are not refused.
   * @returns the stream as `get` answers it.
   * @throws AppError 400 (`name`, `status`, non-uuid id), 401, 404 unknown or another team's.
   */
  async update(ctx: RequestContext, id: unknown, body: unknown): Promise<StreamDetail> {
    const principal = requirePrincipal(ctx);
    const streamId = parseUuidParam("stream_id", id);
    const input = parseInput(updateStreamInput, body);
    const [row] = await queryRows<StreamRow>(
      this.ds,
      // A cancelled stream stays cancelled (archiving it changes nothing); an archived one may be cancelled.
      `UPDATE streams SET name = coalesce($3::text, name), updated_at = now(),
              status = CASE WHEN status = 'cancelled' THEN status ELSE coalesce($4::text, status) END,
              cancelled_at = CASE WHEN $4::text = 'cancelled' THEN coalesce(cancelled_at, now()) ELSE cancelled_at END,
              archived_at = CASE WHEN $4::text = 'archived' AND status <> 'cancelled' THEN coalesce(archived_at, now())
                                 ELSE archived_at END
        WHERE id = $1 AND team_id = $2 RETURNING ${STREAM_COLUMNS}`,
      [streamId, principal.teamId, input.name ?? null, input.status ?? null],
    );
    if (!row) throw AppError.notFound("No such stream");
    // New requests naming it are refused from now on, in every process (400, `metadata.stream_id`).
    if (input.status) await this.directory.closed(streamId, principal.teamId, row.status as typeof input.status);
    if (input.status === "cancelled") {
      const open = await queryRows<{ id: string }>(
        this.ds,
        `SELECT id FROM responses WHERE team_id = $1 AND stream_id = $2 AND status = 'in_progress'`,
        [principal.teamId, streamId],
      );
      for (const r of open) await this.background.end(r.id, "cancelled", principal.teamId);
    }
    return this.get(ctx, streamId);
  }

  private async row(teamId: string, streamId: string): Promise<StreamRow> {
    const [row] = await queryRows<StreamRow>(
      this.ds,
      `SELECT ${STREAM_COLUMNS} FROM streams WHERE id = $1 AND team_id = $2`,
      [streamId, teamId],
    );
    if (!row) throw AppError.notFound("No such stream");
    return row;
  }
}
