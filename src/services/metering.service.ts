/**
 * Metering by group commit (DESIGN §1 "The data plane's hot path stays lean"): every finished
 * inference request hands its activity row, its usage charge and (for stored responses) its
 * Response row to `record`, which resolves once they are durably committed. Records that arrive
 * while a flush runs are written together by the next flush: one transaction, a few multi-row
 * statements, however many requests. A request id is charged at most once (activity primary key
 * + the ledger's unique `(type, source_id)`), and `balance_after_micros` never goes below zero.
 * Also keeps the per-team balance cache that create operations consult for the 402 check.
 */
import type { Logger } from "pino";
import type { DataSource, EntityManager } from "typeorm";
import { v7 as uuidv7 } from "uuid";
import { queryRows } from "../db/sql.js";
import type { ActivityStatus, ActivityType } from "../entities/activity.entity.js";
import type { CacheBus } from "./cache-bus.js";
import type { Principal } from "./context.js";
import { AppError, ErrorCode } from "./errors.js";
import type { TokenUsage } from "./money.js";

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
}

/** What the ledger did for one record. */
export interface MeteredCharge {
  /** Micro-USD actually debited (capped at the balance; 0 for duplicates and free requests). */
  chargedMicros: bigint;
  /** The team's balance after this charge, micro-USD. */
  balanceAfterMicros: bigint | null;
}

interface Pending {
  record: UsageRecord;
  resolve: (charge: MeteredCharge) => void;
  reject: (err: unknown) => void;
}

interface CachedBalance {
  micros: bigint;
  at: number;
}

export class MeteringService {
  private queue: Pending[] = [];
  private flushing = false;
  private readonly balances = new Map<string, CachedBalance>();
  /** Flushes done and rows written, for logs and benchmarks. */
  readonly stats = { flushes: 0, rows: 0 };

  constructor(
    private readonly ds: DataSource,
    bus: CacheBus,
    private readonly logger: Logger,
    private readonly maxRows: number,
    private readonly balanceTtlMs: number,
  ) {
    bus.on("balance", (teamId) => this.balances.delete(teamId));
    bus.on("*", () => this.balances.clear());
  }

  /**
   * Queues `record` for the next group commit.
   * @returns once it is committed, with what the ledger charged.
   * @throws AppError 503 when the database refused the flush twice (nothing of it was written).
   */
  record(record: UsageRecord): Promise<MeteredCharge> {
    return new Promise((resolve, reject) => {
      this.queue.push({ record, resolve, reject });
      if (!this.flushing) {
        this.flushing = true;
        // Let the requests finishing in this turn of the event loop join the first flush.
        setImmediate(() => void this.drain());
      }
    });
  }

  /**
   * Raises 402 when the team has no credit (DESIGN §3 Money: "before any engine work").
   * Reads the cached balance (refreshed by every flush, by NOTIFY, and after `balanceTtlMs`).
   */
  async assertCredit(teamId: string): Promise<void> {
    const balance = await this.balance(teamId);
    if (balance <= 0n) {
      throw new AppError(ErrorCode.InsufficientCredit, "Insufficient credit: add credit to continue");
    }
  }

  /** The team's credit balance in micro-USD (cached). */
  async balance(teamId: string): Promise<bigint> {
    const cached = this.balances.get(teamId);
    if (cached && Date.now() - cached.at <= this.balanceTtlMs) return cached.micros;
    const rows = await queryRows<{ b: string }>(this.ds, "SELECT credit_balance_micros AS b FROM teams WHERE id = $1", [
      teamId,
    ]);
    const micros = rows[0] ? BigInt(rows[0].b) : 0n;
    this.balances.set(teamId, { micros, at: Date.now() });
    return micros;
  }

  /** Waits until everything queued so far is written. */
  async drainAll(): Promise<void> {
    while (this.flushing || this.queue.length > 0) await new Promise((r) => setTimeout(r, 5));
  }

  private async drain(): Promise<void> {
    try {
      while (this.queue.length > 0) {
        const batch = this.queue.splice(0, this.maxRows);
        let charges: Map<string, MeteredCharge> | undefined;
        let lastError: unknown;
        for (let attempt = 0; attempt < 2 && !charges; attempt++) {
          try {
            charges = await this.ds.transaction((em) =>
              this.write(
                em,
                batch.map((p) => p.record),
              ),
            );
          } catch (err) {
            lastError = err;
            this.logger.warn({ err, rows: batch.length, attempt }, "metering flush failed");
          }
        }
        if (!charges) {
          this.logger.error({ err: lastError, rows: batch.length }, "metering flush failed twice; requests fail");
          const error = new AppError(ErrorCode.EngineUnavailable, "Could not record the request; retry later");
          for (const p of batch) p.reject(error);
          continue;
        }
        this.stats.flushes++;
        this.stats.rows += batch.length;
        const now = Date.now();
        for (const p of batch) {
          const after = charges.get(p.record.id)?.balanceAfterMicros;
          if (after !== undefined && after !== null)
            this.balances.set(p.record.principal.teamId, { micros: after, at: now });
        }
        for (const p of batch) p.resolve(charges.get(p.record.id) ?? { chargedMicros: 0n, balanceAfterMicros: null });
      }
    } finally {
      this.flushing = false;
    }
  }

  /** One group commit: activity rows, stored responses, ledger charges, team balances, key use. */
  private async write(em: EntityManager, records: UsageRecord[]): Promise<Map<string, MeteredCharge>> {
    const activity = records.map((r) => ({
      id: r.id,
      team_id: r.principal.teamId,
      user_id: r.principal.userId,
      api_key_id: r.principal.apiKey?.id ?? null,
      api_key_name: r.principal.apiKey?.name ?? null,
      api_key_prefix: r.principal.apiKey?.prefix ?? null,
      type: r.type,
      status: r.status,
      endpoint: r.endpoint,
      model: r.model,
      custom_id: r.customId,
      stream_id: r.streamId,
      prompt_tokens: r.usage.promptTokens,
      completion_tokens: r.usage.completionTokens,
      total_tokens: r.usage.promptTokens + r.usage.completionTokens,
      cached_prompt_tokens: r.usage.cachedPromptTokens,
      cost_micros: r.costMicros.toString(),
      body_json: r.bodyJson ?? null,
      result_json: r.resultJson ?? null,
      error_json: r.errorJson ?? null,
      engine_ms: r.engineMs === null ? null : Math.round(r.engineMs),
      created_at: r.createdAt.toISOString(),
      completed_at: r.completedAt?.toISOString() ?? null,
    }));
    const inserted = await queryRows<{ id: string }>(
      em,
      `INSERT INTO activity (id, team_id, user_id, api_key_id, api_key_name, api_key_prefix, type, status, endpoint,
                             model, custom_id, stream_id, prompt_tokens, completion_tokens, total_tokens,
                             cached_prompt_tokens, cost_micros, body_json, result_json, error_json, engine_ms,
                             created_at, completed_at)
       SELECT * FROM jsonb_to_recordset($1::jsonb) AS x(
         id uuid, team_id uuid, user_id uuid, api_key_id uuid, api_key_name text, api_key_prefix text, type text,
         status text, endpoint text, model text, custom_id text, stream_id uuid, prompt_tokens integer,
         completion_tokens integer, total_tokens integer, cached_prompt_tokens integer, cost_micros bigint,
         body_json jsonb, result_json jsonb, error_json jsonb, engine_ms integer, created_at timestamptz,
         completed_at timestamptz)
       ON CONFLICT (id) DO NOTHING
       RETURNING id`,
      [JSON.stringify(activity)],
    );
    const fresh = new Set(inserted.map((r) => r.id));

    const responses = records
      .filter((r) => r.response && fresh.has(r.id))
      .map((r) => ({
        id: r.id,
        team_id: r.principal.teamId,
        user_id: r.principal.userId,
        api_key_id: r.principal.apiKey?.id ?? null,
        model: r.model,
        status: r.response!.status,
        background: r.response!.background,
        stream_id: r.streamId,
        metadata: r.response!.metadata,
        request_json: r.response!.requestJson,
        response_json: r.response!.responseJson,
        created_at: r.createdAt.toISOString(),
        completed_at: r.completedAt?.toISOString() ?? null,
      }));
    if (responses.length > 0) {
      await em.query(
        `INSERT INTO responses (id, team_id, user_id, api_key_id, model, status, background, stream_id, metadata,
                                request_json, response_json, created_at, completed_at)
         SELECT * FROM jsonb_to_recordset($1::jsonb) AS x(
           id uuid, team_id uuid, user_id uuid, api_key_id uuid, model text, status text, background boolean,
           stream_id uuid, metadata jsonb, request_json jsonb, response_json jsonb, created_at timestamptz,
           completed_at timestamptz)
         ON CONFLICT (id) DO NOTHING`,
        [JSON.stringify(responses)],
      );
    }

    const charges = new Map<string, MeteredCharge>();
    const billable = records.filter((r) => fresh.has(r.id) && r.costMicros > 0n);
    if (billable.length > 0) {
      const teamIds = [...new Set(billable.map((r) => r.principal.teamId))].sort();
      // Lock in id order so concurrent flushes (other processes) cannot deadlock.
      const locked = await queryRows<{ id: string; b: string }>(
        em,
        "SELECT id, credit_balance_micros AS b FROM teams WHERE id = ANY($1::uuid[]) ORDER BY id FOR UPDATE",
        [teamIds],
      );
      const balance = new Map(locked.map((t) => [t.id, BigInt(t.b)]));
      const ledger = billable.map((r) => {
        const before = balance.get(r.principal.teamId) ?? 0n;
        const charged = r.costMicros < before ? r.costMicros : before;
        const after = before - charged;
        balance.set(r.principal.teamId, after);
        charges.set(r.id, { chargedMicros: charged, balanceAfterMicros: after });
        return {
          id: uuidv7(),
          team_id: r.principal.teamId,
          amount_micros: (-charged).toString(),
          balance_after_micros: after.toString(),
          source_id: r.id,
          description:
            charged < r.costMicros
              ? `${r.model} ${r.endpoint} (cost ${r.costMicros} capped at the balance)`
              : `${r.model} ${r.endpoint}`,
        };
      });
      await em.query(
        `INSERT INTO credit_ledger (id, team_id, type, amount_micros, balance_after_micros, source_id, description)
         SELECT id, team_id, 'usage', amount_micros, balance_after_micros, source_id, description
           FROM jsonb_to_recordset($1::jsonb) AS x(id uuid, team_id uuid, amount_micros bigint,
                balance_after_micros bigint, source_id text, description text)`,
        [JSON.stringify(ledger)],
      );
      const updates = [...balance].map(([id, b]) => ({ id, b: b.toString() }));
      await em.query(
        `UPDATE teams t SET credit_balance_micros = x.b, updated_at = now()
           FROM jsonb_to_recordset($1::jsonb) AS x(id uuid, b bigint) WHERE t.id = x.id`,
        [JSON.stringify(updates)],
      );
    }

    const keyIds = [...new Set(records.map((r) => r.principal.apiKey?.id).filter((k): k is string => !!k))].sort();
    if (keyIds.length > 0) {
      await em.query(
        `UPDATE api_keys SET last_used_at = now()
          WHERE id = ANY($1::uuid[]) AND (last_used_at IS NULL OR last_used_at < now() - interval '1 second')`,
        [keyIds],
      );
    }
    return charges;
  }
}
