/**
 * API key budgets (issue 29, item 1): a key with `budget_micros` per `budget_period` never spends
 * more than that in one window (a UTC day, week from Monday or month, or ever for `total`), with
 * the same exactness as a team's credit, across every API process on the database.
 *
 * The protocol is the lease protocol of `lease-pool.ts` with a key's remaining budget as the
 * account: leases live in `api_key_leases` (one row per key and process), the invariant is
 *
 *     budget_micros − spent in the current window ≥ Σ micros of the key's unexpired leases
 *
 * and an acquire locks the key's `api_key_spend` row, the row the metering group commit locks to
 * add a charge. A request of a key with a budget reserves its worst case here as well as from the
 * team's credit (`InferenceService`), before any engine work, and settles both at the real charge.
 * The group commit (`KEY_BUDGET_CTES`) caps each charge at what the key has left in its window,
 * adds it to the key's spend and takes it off the charging process's key lease, in the statement
 * that writes the ledger entry: the ledger and the key's spend move together, and the spend never
 * passes the budget even when a lease was lost (the residual risk of the lease protocol) or the
 * budget was lowered under requests in flight.
 *
 * Windows: a charge counts in the window in which its group commit runs (the database clock).
 * When a window ends the spend starts over at zero; leases taken in the old window stay covered,
 * since the remaining budget only grows then.
 *
 * A refusal is 402 (`api_key_budget_exceeded`) naming the limit, its window, when it starts over
 * (`extra.resets_at`, and `Retry-After` in seconds, none for `total`), what was spent and what the
 * request needs.
 */
import type { Logger } from "pino";
import type { DataSource } from "typeorm";
import { AppError, ErrorCode } from "../../shared/errors.js";
import type { CacheBus } from "../platform/cache-bus.js";
import { type CreditLeaseOptions, type CreditReservation, type LeaseKind, LeasePool } from "./lease-pool.js";

/** Cache-bus topic asking every process to give back the unpromised part of a key's budget lease. */
export const KEY_BUDGET_SHRINK_TOPIC = "key-budget-shrink";

/** What a key's acquire reads beside its free amount, for the refusal (`freeSql`'s `info`). */
interface BudgetInfo {
  budget_micros: string;
  budget_period: "day" | "week" | "month" | "total";
  spent_micros: string;
  /** ISO 8601 (PostgreSQL's jsonb text of a timestamptz); null for `total`. */
  resets_at: string | null;
}

/** How a refusal names each window. */
const WINDOW_WORDS: Record<BudgetInfo["budget_period"], string> = {
  day: "today (UTC)",
  week: "this week (UTC, from Monday)",
  month: "this month (UTC)",
  total: "in total",
};

/** A key's remaining budget as a lease account. */
const KEY_BUDGET: LeaseKind = {
  table: "api_key_leases",
  column: "key_id",
  shrinkTopic: KEY_BUDGET_SHRINK_TOPIC,
  lockSql: "SELECT 1 FROM api_key_spend WHERE key_id = $1 FOR NO KEY UPDATE",
  freeSql: `SELECT k.id, GREATEST(0, k.budget_micros - w.spent - held.micros) AS micros, held.micros AS held,
                   jsonb_build_object('budget_micros', k.budget_micros::text, 'budget_period', k.budget_period,
                                      'spent_micros', w.spent::text, 'resets_at', w.resets_at) AS info
              FROM api_keys k
              JOIN api_key_spend s ON s.key_id = k.id
             CROSS JOIN LATERAL (
               SELECT CASE WHEN s.window_start = api_key_budget_window(k.budget_period, now()) THEN s.spent_micros
                           ELSE 0 END AS spent,
                      nullif(api_key_budget_reset(k.budget_period, now()), 'infinity') AS resets_at
             ) w
             CROSS JOIN held
             WHERE k.id = $1 AND k.budget_micros IS NOT NULL`,
  missing: "unlimited",
  refusal: (keyId, worstMicros, available, raw) => {
    const info = raw as unknown as BudgetInfo;
    const resetsAt = info.resets_at === null ? null : new Date(info.resets_at);
    const retryAfterS =
      resetsAt === null ? undefined : Math.max(1, Math.ceil((resetsAt.getTime() - Date.now()) / 1000));
    const when =
      resetsAt === null
        ? "a total budget does not start over; an owner or admin can raise it"
        : `it starts over at ${resetsAt.toISOString()}`;
    return new AppError(
      ErrorCode.InsufficientCredit,
      `API key budget reached: this request may cost up to ${worstMicros} micro-USD and ${available} micro-USD ` +
        `of the key's budget is available (budget_micros ${info.budget_micros} per ${info.budget_period}, ` +
        `${info.spent_micros} spent ${WINDOW_WORDS[info.budget_period]}; ${when})`,
      {
        limit: "budget_micros",
        scope: "api_key",
        api_key_id: keyId,
        value: Number(info.budget_micros),
        window: info.budget_period,
        resets_at: resetsAt?.toISOString() ?? null,
        spent_micros: Number(info.spent_micros),
        required_micros: Number(worstMicros),
        available_micros: Number(available),
      },
      retryAfterS,
    ).because("api_key_budget_exceeded");
  },
};

/** The per-process side of the lease protocol for API key budgets (see the module header). */
export class KeyBudgetService extends LeasePool {
  /**
   * @param holder this process's holder id: the team credit pool's (`CreditService.holder`), so
   *   the group commit takes charges off both of this process's leases with one parameter.
   */
  constructor(ds: DataSource, bus: CacheBus, logger: Logger, holder: string, opts: Partial<CreditLeaseOptions> = {}) {
    super(ds, bus, logger, KEY_BUDGET, opts, holder);
  }

  /**
   * Reserves `worstMicros` of the key's budget for one request; a key without a budget (in the
   * database, whatever the caller's cached policy said) reserves nothing.
   * @throws AppError 402 `api_key_budget_exceeded` (see the module header) when the key's budget
   *   not promised to other in-flight requests, in every process, does not cover it.
   */
  override reserve(keyId: string, worstMicros: bigint): Promise<CreditReservation> {
    return super.reserve(keyId, worstMicros);
  }
}

/**
 * Key budgets in the metering group commit (`MeteringService.write`): data-modifying CTEs of its
 * one statement. Reads a CTE named `metered`: one row per newly recorded request with a cost
 * (`id`, `team_id`, `cost_micros`, `model`, `endpoint`, `ledger_id`, `api_key_id`). Defines:
 * - `key_locked`: the spend rows of the keys of `metered` that have a budget, locked FOR NO KEY
 *   UPDATE in key order (the lock a key's lease acquire takes), with `before` = the spend in the
 *   current window (0 when the row's window has ended) and `window_start` the current window;
 * - `key_capped`: `metered` with `full_cost` (the request's cost) and `cost_micros` capped at what
 *   the key has left, `min(cost, max(0, budget − before − (key_running − cost)))` with
 *   `key_running` the key's costs so far in ledger id order; keys without a budget keep their cost.
 * `keySpendCtes` then adds what the ledger charged (`charges.charged`, after the team's cap) to
 * each key's spend and takes it off this process's key leases.
 */
export const KEY_BUDGET_CTES = `key_locked AS (
  SELECT s.key_id, k.budget_micros, api_key_budget_window(k.budget_period, now()) AS window_start,
         CASE WHEN s.window_start = api_key_budget_window(k.budget_period, now()) THEN s.spent_micros ELSE 0 END
           AS before
    FROM api_key_spend s JOIN api_keys k ON k.id = s.key_id
   WHERE s.key_id IN (SELECT api_key_id FROM metered) AND k.budget_micros IS NOT NULL
   ORDER BY s.key_id
     FOR NO KEY UPDATE OF s
),
key_capped AS (
  -- Requests of keys without a budget keep their cost (no sort: the common case costs little).
  SELECT m.id, m.team_id, m.model, m.endpoint, m.ledger_id, m.api_key_id, m.cost_micros AS full_cost, m.cost_micros
    FROM metered m
   WHERE m.api_key_id IS NULL OR NOT EXISTS (SELECT FROM key_locked l WHERE l.key_id = m.api_key_id)
  UNION ALL
  SELECT m.id, m.team_id, m.model, m.endpoint, m.ledger_id, m.api_key_id, m.cost_micros AS full_cost,
         LEAST(m.cost_micros, GREATEST(0, l.budget_micros - l.before - (m.key_running - m.cost_micros)))
    FROM (SELECT metered.*, sum(cost_micros) OVER (PARTITION BY api_key_id ORDER BY ledger_id) AS key_running
            FROM metered WHERE api_key_id IN (SELECT key_id FROM key_locked)) m
    JOIN key_locked l ON l.key_id = m.api_key_id
)`;

/**
 * The second half of the key budgets in the group commit, after `USAGE_CHARGE_CTES` (it reads
 * `charges` and `key_locked`; `holder` is the statement's parameter holding this process's lease
 * holder, e.g. `$2`): `key_spend` sets each key's spend to `before` plus what its requests were
 * charged, in the current window; `key_leases` takes the same off this process's lease of the key.
 */
export const keySpendCtes = (holder: string) => `key_charged AS (
  SELECT api_key_id, sum(charged) AS total FROM charges
   WHERE api_key_id IN (SELECT key_id FROM key_locked)
   GROUP BY api_key_id
),
key_spend AS (
  UPDATE api_key_spend s SET spent_micros = l.before + c.total, window_start = l.window_start
    FROM key_locked l JOIN key_charged c ON c.api_key_id = l.key_id
   WHERE s.key_id = l.key_id
),
key_leases AS (
  UPDATE api_key_leases kl SET micros = GREATEST(0, kl.micros - c.total), updated_at = now()
    FROM key_charged c
   WHERE kl.key_id = c.api_key_id AND kl.holder = ${holder}::uuid
)`;
