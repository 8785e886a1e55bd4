/**
 * Batches, the API side (issue 7; DESIGN §3 Batches): create (every item validated up front, the
 * batch stored atomically with its run and expiry jobs), read with progress and totals, list,
 * cancel, expire, and the results (JSON and NDJSON, both streamed from the database in pages).
 * The worker side is `batch-runner.ts`.
 *
 * States (exactly these): `pending` → `running` → `completed` | `failed` | `cancelled`.
 * - cancel: `cancelled` at once; items not started become `cancelled` and never run; running items
 *   finish and keep their results.
 * - expiry (the window passed): unfinished items end `failed` with `error_json.code = "expired"`
 *   (running ones are aborted and charged for what they generated), and the batch is `failed`.
 * - otherwise, when every item has ended: `completed` if at least one item completed, else `failed`.
 * Totals are sums over the batch's activity records (what each finished item was charged), so they
 * always equal those records.
 */
import type { Logger } from "pino";
import type { DataSource, EntityManager, QueryRunner } from "typeorm";
import { v7 as uuidv7 } from "uuid";
import { z } from "zod";
import { type Queryable, queryRows } from "../../db/sql.js";
import { AppError, parseInput, parseUuidParam } from "../../shared/errors.js";
import type { JobSender, SqlExecutor } from "../platform/job-queue.port.js";
import type { CacheBus } from "../platform/cache-bus.js";
import { type RequestContext, requirePrincipal } from "../platform/context.js";
import type { MeteringService } from "../metering/metering.service.js";
import { toJsonbText } from "../metering/metering.service.js";
import type { ModelCatalogService } from "../models/model-catalog.service.js";
import { optionalQuery, queryInt } from "../platform/validation.js";
import { redactedRequest } from "../events/webhooks/webhook-target.js";
import {
  type ItemIssue,
  type PreparedItem,
  itemShape,
  prepareBatchItem,
  withConversation,
} from "./batch-operations.js";
import { type BatchBodyLimits, parseItem, scanBatchBody } from "./batch-body.js";
import type { ConversationReader } from "../inference/use-cases/response.js";

export type BatchStatus = "pending" | "running" | "completed" | "failed" | "cancelled";
export type BatchItemStatus = BatchStatus;

/** Item counts by status. */
export interface BatchRequestCounts {
  total: number;
  pending: number;
  running: number;
  completed: number;
  failed: number;
  cancelled: number;
}

/** spec: Batch, plus `object`, `metadata`, `output_url`, `request_counts`, `cancelled_at`, `expires_at`. */
export interface BatchObject {
  id: string;
  object: "batch";
  status: BatchStatus;
  window: "24h";
  request_count: number;
  request_counts: BatchRequestCounts;
  metadata: Record<string, unknown> | null;
  /** Absolute URL of `results.jsonl` on the request's origin. */
  output_url: string;
  /** ISO 8601. */
  created_at: string;
  updated_at: string;
  completed_at: string | null;
  cancelled_at: string | null;
  expires_at: string;
  total_prompt_tokens: number;
  total_completion_tokens: number;
  total_tokens: number;
  /** Micro-USD. */
  total_cost_micros: number;
}

/** One result row (the `results` array and each `results.jsonl` line), in input order. */
export interface BatchResultRow {
  custom_id: string | null;
  status: "completed" | "failed" | "cancelled";
  result_json: unknown;
  error_json: unknown;
}

/** `GET /v1/batches` (`has_more` and `limit`/`after` paging beyond the spec's `{items}`). */
export interface BatchList {
  items: BatchObject[];
  has_more: boolean;
}

/** What `create` needs to know besides the body. */
export interface BatchServiceOptions {
  /** The window, seconds (24 h; shortened in tests). */
  windowS: number;
  limits: BatchBodyLimits;
  /** Base URL for `output_url` when the request's origin is unknown. */
  publicUrl: string;
}

/**
 * pg-boss's limit on one `batch-run` handler, seconds (23 h: its maximum is a day). A batch runs
 * within its 24 h window; were the job failed while `run` goes on, its retry would find the batch
 * running here and return, freeing a worker slot while the batch still runs.
 */
export const BATCH_JOB_EXPIRE_S = 23 * 3600;

/** Items validated and inserted per step of a create, at most. */
const CREATE_CHUNK = 500;
/** Item bytes per step of a create, at most (a step may hold the event loop for a few ms per MB). */
const CREATE_CHUNK_BYTES = 1024 * 1024;
/** Result rows read per page while streaming results. */
const RESULTS_PAGE = 500;
/** Most issues a refused batch lists. */
const MAX_ISSUES = 50;

const EXPIRED_ERROR = { code: "expired", message: "The batch's completion window passed before this request finished" };

const batchMembers = z.object({
  window: z.literal("24h", { error: 'must be "24h"' }).nullish(),
  completion_window: z.literal("24h", { error: 'must be "24h"' }).nullish(),
  // OpenAI's bounds on metadata: at most 16 keys of up to 64 characters; values here any JSON of
  // at most 16 KiB in all (it is returned with every read and list).
  metadata: z
    .record(z.string().max(64), z.unknown())
    .refine((m) => Object.keys(m).length <= 16, "at most 16 keys")
    .refine((m) => JSON.stringify(m).length <= 16 * 1024, "at most 16 KiB of JSON")
    .nullish(),
});

/**
 * The whole create body as the OpenAPI document shows it (issue 13, item 1): the members and the
 * items are validated with these same parts (`batchMembers`, `itemShape`) while the body is
 * scanned, which a single schema over a body of up to 100 MB could not do.
 */
export const batchCreateBody = batchMembers.extend({ requests: z.array(itemShape).min(1) });

/** `GET /v1/batches` query. */
export const listQuery = z.object({
  limit: optionalQuery(queryInt(1, 100)),
  after: optionalQuery(z.uuid()),
});

interface BatchRow {
  id: string;
  status: BatchStatus;
  window: "24h";
  metadata: Record<string, unknown> | null;
  request_count: number;
  created_at: Date;
  updated_at: Date;
  completed_at: Date | null;
  cancelled_at: Date | null;
  expires_at: Date;
}

interface Aggregates {
  counts: BatchRequestCounts;
  totals: { prompt: number; completion: number; total: number; cost: number };
}

const BATCH_COLUMNS = `id, status, "window", metadata, request_count, created_at, updated_at, completed_at, cancelled_at,
  expires_at`;

/** Batches of a team: create, read, list, cancel, results; and expiry (jobs and reads). */
export class BatchesService {
  constructor(
    private readonly ds: DataSource,
    private readonly catalog: ModelCatalogService,
    private readonly metering: MeteringService,
    private readonly jobs: JobSender,
    private readonly bus: CacheBus,
    private readonly logger: Logger,
    private readonly opts: BatchServiceOptions,
    /** Reads the conversation a Responses item continues (`ResponsesService.conversation`). */
    private readonly conversations: ConversationReader,
  ) {}

  /** @throws AppError 403 when `teamId` keeps no bodies (zero data retention); `lock` takes a share lock on its row. */
  private async assertRetentionAllowsBatches(em: EntityManager, teamId: string, lock: boolean): Promise<void> {
    const [team] = await queryRows<{ zdr: boolean }>(
      em,
      `SELECT zero_data_retention_enabled AS zdr FROM teams WHERE id = $1${lock ? " FOR SHARE" : ""}`,
      [teamId],
    );
    if (team?.zdr) {
      throw AppError.forbidden(
        "Batches store request and result bodies until they are fetched; this team has zero data retention on",
      );
    }
  }

  /**
   * `POST /v1/batches`: validates every item (model, url, the operation's body schema, no
   * `background`, no `stream`), converts Responses bodies to chat, and stores the batch `pending`
   * with its items, its run job and its expiry job in one transaction.
   * @param body the raw request body (up to `limits` bytes; the caller answers 413 above).
   * @throws AppError 400 naming each bad `requests[i]` (with its `custom_id`; nothing stored);
   *   401; 402 when the team has no credit; 413 with more than `maxItems` items or an item larger
   *   than `maxMemberBytes`; 403 when the team has zero data retention on (see below).
   *
   * Zero data retention (issue 8, item 3): a batch is stored request bodies waiting to run and
   * results waiting to be fetched — bodies kept by nature — so a team with the flag on cannot
   * create one (as OpenAI's Batch API is not eligible for zero data retention). The flag is read
   * again under a share lock where the batch row is written, so turning it on meanwhile wins.
   */
  async create(ctx: RequestContext, body: Buffer): Promise<BatchObject> {
    const principal = requirePrincipal(ctx);
    await this.assertRetentionAllowsBatches(this.ds.manager, principal.teamId, false);
    await this.metering.assertCredit(principal.teamId);
    const scanned = await scanBatchBody(body, this.opts.limits);
    const members = parseInput(batchMembers, scanned.members);
    if (scanned.items === null) {
      throw AppError.invalid("Invalid request: requests", [
        { field: "requests", message: scanned.requestsValue === undefined ? "is required" : "must be an array" },
      ]);
    }
    const spans = scanned.items;
    if (spans.length === 0) {
      throw AppError.invalid("Invalid request: requests", [{ field: "requests", message: "must not be empty" }]);
    }
    const id = uuidv7();
    const createdAt = new Date();
    const expiresAt = new Date(createdAt.getTime() + this.opts.windowS * 1000);
    const issues: ItemIssue[] = [];
    let qr: QueryRunner | undefined;
    // The batch as created: the answer shows it so even when a worker claims it (pending →
    // running) between the commit and the answer, as a later read would (seen under CI load).
    let created: BatchRow | undefined;
    // Open the transaction (and write the batch row) when the first rows are ready to insert.
    const transaction = async (): Promise<QueryRunner> => {
      if (qr) return qr;
      qr = this.ds.createQueryRunner();
      await qr.connect();
      // Long as a 200 MiB import's transaction is, its statements (≤ 1 MiB of items each) and the gaps
      // between them (parsing the next ones) are short: the pool's bounds fit it (issue 28, item 1).
      await qr.startTransaction();
      await this.assertRetentionAllowsBatches(qr.manager, principal.teamId, true);
      [created] = await queryRows<BatchRow>(
        qr.manager,
        `INSERT INTO batches (id, team_id, user_id, api_key_id, principal_json, status, metadata, request_count,
                              created_at, updated_at, expires_at)
         VALUES ($1, $2, $3, $4, $5, 'pending', $6, $7, $8, $8, $9)
         RETURNING ${BATCH_COLUMNS}`,
        [
          id,
          principal.teamId,
          principal.userId,
          principal.apiKey?.id ?? null,
          principal,
          members.metadata == null ? null : toJsonbText(members.metadata),
          spans.length,
          createdAt,
          expiresAt,
        ],
      );
      return qr;
    };
    try {
      // Items are parsed, validated and inserted in steps bounded by count and by bytes, with the
      // event loop given back between steps: no single step holds it for long, whatever the
      // items' sizes (issue 7, item 1).
      let rows: Array<PreparedItem & { idx: number }> = [];
      let rowBytes = 0;
      let sinceYield = 0;
      for (let idx = 0; idx < spans.length && issues.length < MAX_ISSUES; idx++) {
        const span = spans[idx];
        const parsed = parseItem(body, span);
        if (parsed.error !== undefined) {
          issues.push({ field: `requests[${idx}]`, message: parsed.error, custom_id: null });
        } else {
          const prepared = prepareBatchItem(this.catalog, principal.teamId, parsed.value, idx);
          const item =
            "issues" in prepared ? null : await withConversation(this.conversations, ctx, prepared.item, issues);
          if ("issues" in prepared) issues.push(...prepared.issues);
          else if (issues.length === 0 && item) {
            rows.push({ ...item, idx });
            rowBytes += span.end - span.start;
          }
        }
        sinceYield += span.end - span.start;
        if (issues.length === 0 && (rows.length >= CREATE_CHUNK || rowBytes >= CREATE_CHUNK_BYTES)) {
          await insertItems(await transaction(), id, rows);
          rows = [];
          rowBytes = 0;
        }
        if (sinceYield >= CREATE_CHUNK_BYTES || idx % CREATE_CHUNK === CREATE_CHUNK - 1) {
          sinceYield = 0;
          await new Promise((resolve) => setImmediate(resolve));
        }
      }
      if (issues.length === 0) await insertItems(await transaction(), id, rows);
      if (issues.length > 0) {
        const listed = issues.slice(0, MAX_ISSUES);
        const fields = [...new Set(listed.map((i) => i.field.replace(/^(requests\[\d+\]).*$/, "$1")))].join(", ");
        throw AppError.invalid(`Invalid batch: ${fields}${issues.length > listed.length ? " (and more)" : ""}`, listed);
      }
      const tx = await transaction();
      const db = executor(tx);
      await this.jobs.send("batch-run", { batchId: id }, { db, retryLimit: 10, expireInSeconds: BATCH_JOB_EXPIRE_S });
      await this.jobs.send("batch-expire", { batchId: id }, { db, startAfter: expiresAt });
      await tx.commitTransaction();
    } catch (err) {
      const open = qr as QueryRunner | undefined;
      if (open?.isTransactionActive) await open.rollbackTransaction().catch(() => undefined);
      throw err;
    } finally {
      await (qr as QueryRunner | undefined)?.release();
    }
    this.logger.info({ batchId: id, teamId: principal.teamId, items: spans.length }, "batch created");
    const n = spans.length;
    return this.toObject(ctx, created!, {
      counts: { total: n, pending: n, running: 0, completed: 0, failed: 0, cancelled: 0 },
      totals: { prompt: 0, completion: 0, total: 0, cost: 0 },
    });
  }

  /**
   * What `POST /v1/batches` checks before its body is read (up to 200 MB): a caller whose team
   * has credit.
   * @throws AppError 401; 402 when the team has no credit.
   */
  async admit(ctx: RequestContext): Promise<void> {
    await this.metering.assertCredit(requirePrincipal(ctx).teamId);
  }

  /**
   * `GET /v1/batches/{id}` (ends it first if its window passed).
   * @throws AppError 400 non-uuid id; 401; 404 unknown or another team's.
   */
  async get(ctx: RequestContext, id: unknown): Promise<BatchObject> {
    const principal = requirePrincipal(ctx);
    const batchId = parseUuidParam("batch_id", id);
    await this.expireOverdue(principal.teamId, batchId);
    const [row] = await queryRows<BatchRow>(
      this.ds,
      `SELECT ${BATCH_COLUMNS} FROM batches WHERE id = $1 AND team_id = $2`,
      [batchId, principal.teamId],
    );
    if (!row) throw AppError.notFound("Batch not found");
    const aggregates = await this.aggregates([batchId]);
    return this.toObject(ctx, row, aggregates.get(batchId));
  }

  /**
   * `GET /v1/batches`: the team's batches, newest first; `limit` 1–100 (default 20), `after` a
   * batch id to page on.
   * @throws AppError 400 bad `limit`/`after`; 401.
   */
  async list(ctx: RequestContext, query: unknown): Promise<BatchList> {
    const principal = requirePrincipal(ctx);
    const q = parseInput(listQuery, query ?? {});
    const limit = q.limit ?? 20;
    await this.expireOverdue(principal.teamId, null);
    const rows = await queryRows<BatchRow>(
      this.ds,
      `SELECT ${BATCH_COLUMNS} FROM batches
        WHERE team_id = $1 AND ($2::uuid IS NULL OR id < $2)
        ORDER BY id DESC LIMIT $3`,
      [principal.teamId, q.after ?? null, limit + 1],
    );
    const page = rows.slice(0, limit);
    const aggregates = await this.aggregates(page.map((r) => r.id));
    return { items: page.map((r) => this.toObject(ctx, r, aggregates.get(r.id))), has_more: rows.length > limit };
  }

  /**
   * `POST /v1/batches/{id}/cancel`: `cancelled` at once; items not started are cancelled and never
   * run; running items finish and keep their results. A batch that already ended is returned as it is.
   * @throws AppError 400 non-uuid id; 401; 404 unknown or another team's.
   */
  async cancel(ctx: RequestContext, id: unknown): Promise<BatchObject> {
    const principal = requirePrincipal(ctx);
    const batchId = parseUuidParam("batch_id", id);
    await this.expireOverdue(principal.teamId, batchId);
    const cancelled = await this.ds.transaction(async (m) => {
      const [row] = await queryRows<{ id: string }>(
        m,
        `UPDATE batches SET status = 'cancelled', cancelled_at = now(), completed_at = now(), updated_at = now()
          WHERE id = $1 AND team_id = $2 AND status IN ('pending', 'running')
          RETURNING id`,
        [batchId, principal.teamId],
      );
      if (!row) return false;
      await m.query(
        `UPDATE batch_items SET status = 'cancelled', completed_at = now()
          WHERE batch_id = $1 AND status = 'pending'`,
        [batchId],
      );
      return true;
    });
    if (cancelled) this.logger.info({ batchId, status: "cancelled" }, "batch state changed");
    return this.get(ctx, batchId);
  }

  /**
   * Ends a batch whose window passed (the expiry job, the worker's reconciler and reads): items not
   * finished become `failed`/`expired`, running ones are aborted wherever they run, the batch is
   * `failed`. No-op when it ended already or its window has not passed.
   * @returns true when this call ended it.
   */
  async expire(batchId: string): Promise<boolean> {
    const ended = await this.ds.transaction(async (m) => {
      const [row] = await queryRows<{ id: string }>(
        m,
        `UPDATE batches SET status = 'failed', completed_at = now(), updated_at = now()
          WHERE id = $1 AND status IN ('pending', 'running') AND expires_at <= now()
          RETURNING id`,
        [batchId],
      );
      if (!row) return false;
      await m.query(
        `UPDATE batch_items SET status = 'failed', error_json = $2::jsonb, completed_at = now()
          WHERE batch_id = $1 AND status IN ('pending', 'running')`,
        [batchId, JSON.stringify(EXPIRED_ERROR)],
      );
      // Runners abort the batch's running items at commit.
      await this.bus.publish("batch-abort", batchId, m);
      return true;
    });
    if (ended) this.logger.info({ batchId, status: "failed", reason: "expired" }, "batch state changed");
    return ended;
  }

  /** Expires the team's overdue batches (one, or all with `batchId` null) before a read. */
  private async expireOverdue(teamId: string, batchId: string | null): Promise<void> {
    const overdue = await queryRows<{ id: string }>(
      this.ds,
      `SELECT id FROM batches
        WHERE team_id = $1 AND ($2::uuid IS NULL OR id = $2) AND status IN ('pending', 'running')
          AND expires_at <= now()`,
      [teamId, batchId],
    );
    for (const { id } of overdue) await this.expire(id);
  }

  /**
   * `GET /v1/batches/{id}/results`: `{batch_id, status, output_url, completed_at, results}`;
   * `results` is null until the batch is terminal. Written to `write` in pieces (a 50,000-item
   * batch is never one string in memory).
   * @throws AppError 400 non-uuid; 401; 404 (before anything is written).
   */
  async writeResults(ctx: RequestContext, id: unknown, write: (chunk: string) => Promise<void>): Promise<void> {
    const batch = await this.get(ctx, id);
    const head = {
      batch_id: batch.id,
      status: batch.status,
      output_url: batch.output_url,
      completed_at: batch.completed_at,
    };
    const prefix = JSON.stringify(head).slice(0, -1);
    // Rows say completed, failed or cancelled only: after a cancel, items still running finish
    // first (seconds at most), and until then `results` stays null like a running batch's.
    const unfinished = batch.request_counts.pending + batch.request_counts.running;
    if (!isTerminal(batch.status) || unfinished > 0) {
      await write(`${prefix},"results":null}`);
      return;
    }
    await write(`${prefix},"results":[`);
    let first = true;
    await this.eachResultPage(batch.id, async (lines) => {
      await write((first ? "" : ",") + lines.join(","));
      first = false;
    });
    await write("]}");
  }

  /**
   * `GET /v1/batches/{id}/results.jsonl`: one JSON line per ended item in input order (`{custom_id,
   * status, result_json, error_json}`, status completed, failed or cancelled; while the batch runs,
   * the items ended so far), read from the database in pages of 500.
   * @throws AppError 400 non-uuid; 401; 404 (before anything is written).
   */
  async writeResultsJsonl(ctx: RequestContext, id: unknown, write: (chunk: string) => Promise<void>): Promise<void> {
    const batch = await this.get(ctx, id);
    await this.eachResultPage(batch.id, async (lines) => write(lines.join("\n") + "\n"), true);
  }

  /** Reads a batch's result rows in input order, a page at a time, as JSON lines. */
  private async eachResultPage(
    batchId: string,
    onPage: (lines: string[]) => Promise<void>,
    endedOnly = false,
  ): Promise<void> {
    let after = -1;
    for (;;) {
      const rows = await queryRows<{ idx: number; line: string | null }>(
        this.ds,
        `SELECT idx, CASE WHEN status IN ('completed', 'failed', 'cancelled') OR NOT $4 THEN
                  json_build_object('custom_id', custom_id, 'status', status, 'result_json', result_json,
                                    'error_json', error_json)::text END AS line
           FROM batch_items WHERE batch_id = $1 AND idx > $2 ORDER BY idx LIMIT $3`,
        [batchId, after, RESULTS_PAGE, endedOnly],
      );
      if (rows.length === 0) return;
      const lines = rows.flatMap((r) => (r.line === null ? [] : [r.line]));
      if (lines.length > 0) await onPage(lines);
      after = rows[rows.length - 1].idx;
      if (rows.length < RESULTS_PAGE) return;
    }
  }

  /** Item counts and activity totals of each batch, in two grouped queries. */
  private async aggregates(batchIds: string[]): Promise<Map<string, Aggregates>> {
    const out = new Map<string, Aggregates>();
    if (batchIds.length === 0) return out;
    for (const id of batchIds) {
      out.set(id, {
        counts: { total: 0, pending: 0, running: 0, completed: 0, failed: 0, cancelled: 0 },
        totals: { prompt: 0, completion: 0, total: 0, cost: 0 },
      });
    }
    const counts = await queryRows<{ batch_id: string; status: BatchItemStatus; n: string }>(
      this.ds,
      `SELECT batch_id, status, count(*) AS n FROM batch_items WHERE batch_id = ANY($1::uuid[]) GROUP BY 1, 2`,
      [batchIds],
    );
    for (const c of counts) {
      const a = out.get(c.batch_id)!;
      a.counts[c.status] = Number(c.n);
      a.counts.total += Number(c.n);
    }
    const totals = await queryRows<{ batch_id: string; p: string; c: string; t: string; cost: string }>(
      this.ds,
      `SELECT batch_id, sum(prompt_tokens) AS p, sum(completion_tokens) AS c, sum(total_tokens) AS t,
              sum(cost_micros) AS cost
         FROM activity WHERE batch_id = ANY($1::uuid[]) GROUP BY 1`,
      [batchIds],
    );
    for (const t of totals) {
      out.get(t.batch_id)!.totals = {
        prompt: Number(t.p),
        completion: Number(t.c),
        total: Number(t.t),
        cost: Number(t.cost),
      };
    }
    return out;
  }

  private toObject(ctx: RequestContext, row: BatchRow, aggregates: Aggregates | undefined): BatchObject {
    const a = aggregates ?? {
      counts: { total: 0, pending: 0, running: 0, completed: 0, failed: 0, cancelled: 0 },
      totals: { prompt: 0, completion: 0, total: 0, cost: 0 },
    };
    const origin = ctx.origin ?? this.opts.publicUrl.replace(/\/+$/, "");
    return {
      id: row.id,
      object: "batch",
      status: row.status,
      window: row.window,
      request_count: row.request_count,
      request_counts: a.counts,
      metadata: row.metadata,
      output_url: `${origin}/v1/batches/${row.id}/results.jsonl`,
      created_at: row.created_at.toISOString(),
      updated_at: row.updated_at.toISOString(),
      completed_at: row.completed_at?.toISOString() ?? null,
      cancelled_at: row.cancelled_at?.toISOString() ?? null,
      expires_at: row.expires_at.toISOString(),
      total_prompt_tokens: a.totals.prompt,
      total_completion_tokens: a.totals.completion,
      total_tokens: a.totals.total,
      total_cost_micros: a.totals.cost,
    };
  }
}

/** True for `completed`, `failed`, `cancelled`. */
export function isTerminal(status: BatchStatus): boolean {
  return status === "completed" || status === "failed" || status === "cancelled";
}

/**
 * Inserts a batch's items. Each body is stored as the JSON text of what runs (`batch_items.body_json`
 * is `json`, kept verbatim; review 11b, finding H1): object keys keep their order and NUL characters
 * and lone surrogates stay (as `\u` escapes), so an item runs the request the caller sent. The texts
 * go through `text[]` and a `::json` cast, which only checks the syntax; parsing them inside a json
 * document (`json_to_recordset`) would refuse `\u0000`.
 */
async function insertItems(db: Queryable, batchId: string, rows: Array<PreparedItem & { idx: number }>): Promise<void> {
  if (rows.length === 0) return;
  await db.query(
    `INSERT INTO batch_items (batch_id, idx, request_id, custom_id, url, body_json)
     SELECT $1, x.idx, x.request_id, x.custom_id, x.url, x.body::json
       FROM unnest($2::integer[], $3::uuid[], $4::text[], $5::text[], $6::text[]) AS x(idx, request_id, custom_id, url, body)`,
    [
      batchId,
      rows.map((r) => r.idx),
      rows.map(() => uuidv7()),
      rows.map((r) => r.customId),
      rows.map((r) => r.url),
      // A webhook token is a secret: never stored (batch items send no per-item webhook anyway).
      rows.map((r) => JSON.stringify(redactedRequest(r.body))),
    ],
  );
}

function executor(qr: QueryRunner): SqlExecutor {
  return (text, values) => queryRows<Record<string, unknown>>(qr, text, values);
}
