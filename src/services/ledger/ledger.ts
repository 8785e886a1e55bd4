/**
 * The one writer of `credit_ledger` (issue 25, item 3): every statement that names the table is
 * here (test/ledger-writer.test.ts fails on SQL elsewhere that does). Credit-side entries (issue
 * 10, item 4; DESIGN §3 Money): `top_up`, `refund`, `adjustment` (`appendLedgerCredit`) and the
 * signup `grant` (`appendSignupGrant`); usage charges as CTEs the metering group commit runs in
 * its one statement (`USAGE_CHARGE_CTES`); reads for the transactions list and team removal.
 * The ledger is append-only (a trigger refuses UPDATE and DELETE).
 *
 * Rules, as the group commit keeps them for `usage`:
 * - Nothing applies twice: every entry has a source unique per kind (`UNIQUE (type, source_id)`),
 *   e.g. the top-up session id. Appending an entry whose source is already in the ledger changes
 *   nothing and answers the entry that is there (`applied: false`).
 * - One writer per team at a time: the team row is locked (`FOR NO KEY UPDATE`, the lock the
 *   group commit and the credit leases take), so `balance_after_micros` is the balance after this
 *   entry in commit order, and the balance on `teams` moves in the same transaction.
 * - Never below zero: a negative entry (a refund paid back to the customer, a downward
 *   adjustment) must be covered by the balance less the credit leased to in-flight requests
 *   (`CreditService`'s invariant `balance ≥ Σ leases`); otherwise 409 and nothing is written.
 * - Every process learns the new balance through the same NOTIFY the group commit sends
 *   (`balance:<team>=<micros>` on the cache bus), so a team that was out of credit is served again
 *   (the caller may also tell its own process at once: `BillingService` does after a top-up).
 */
import { v7 as uuidv7 } from "uuid";
import type { EntityManager } from "typeorm";
import type { LedgerEntryType } from "../../entities/ledger-entry.entity.js";
import { type Queryable, queryRows } from "../../db/sql.js";
import { AppError } from "../../shared/errors.js";
import { CACHE_CHANNEL } from "../platform/cache-bus.js";

/** One entry to append. Amounts are signed micro-USD (positive credits). */
export interface LedgerCreditInput {
  teamId: string;
  type: Exclude<LedgerEntryType, "usage">;
  amountMicros: bigint;
  /** Unique per `type`: the top-up session id, a refund's provider id, … */
  sourceId: string;
  description: string;
  externalProvider?: string | null;
  externalPaymentId?: string | null;
}

/** What the ledger holds for the source after the call. */
export interface LedgerCreditResult {
  /** The ledger entry's id (the existing one when the source was already applied). */
  entryId: string;
  balanceAfterMicros: bigint;
  /** False when the source was already in the ledger (nothing changed). */
  applied: boolean;
}

/**
 * Appends one entry and moves the team's balance, once per `(type, sourceId)`.
 * Must run inside a transaction (`em` from `DataSource.transaction`); the team row stays locked
 * until it commits.
 * @throws AppError 404 when the team does not exist; 409 when a negative amount is not covered by
 *   the credit not leased to in-flight requests.
 */
export async function appendLedgerCredit(em: EntityManager, input: LedgerCreditInput): Promise<LedgerCreditResult> {
  const locked = await queryRows<{ id: string }>(em, "SELECT id FROM teams WHERE id = $1 FOR NO KEY UPDATE", [
    input.teamId,
  ]);
  if (locked.length === 0) throw AppError.notFound("Team not found");
  // New statements from here: fresh snapshots that see every commit made before the lock.
  const existing = await queryRows<{ id: string; balance_after_micros: string }>(
    em,
    "SELECT id, balance_after_micros::text FROM credit_ledger WHERE type = $1 AND source_id = $2",
    [input.type, input.sourceId],
  );
  if (existing[0]) {
    return { entryId: existing[0].id, balanceAfterMicros: BigInt(existing[0].balance_after_micros), applied: false };
  }
  const [team] = await queryRows<{ balance: string; leased: string }>(
    em,
    `SELECT t.credit_balance_micros::text AS balance,
            (SELECT coalesce(sum(micros), 0) FROM credit_leases WHERE team_id = t.id AND expires_at > now())::text AS leased
       FROM teams t WHERE t.id = $1`,
    [input.teamId],
  );
  const balance = BigInt(team.balance);
  const after = balance + input.amountMicros;
  if (input.amountMicros < 0n && after < BigInt(team.leased)) {
    throw AppError.conflict(
      `This entry (${input.amountMicros} micro-USD) would take the balance (${balance} micro-USD, ` +
        `${team.leased} of it promised to requests in flight) below zero`,
    );
  }
  const entryId = uuidv7();
  await em.query(
    `INSERT INTO credit_ledger (id, team_id, type, amount_micros, balance_after_micros, source_id, description,
                                external_provider, external_payment_id)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
    [
      entryId,
      input.teamId,
      input.type,
      input.amountMicros.toString(),
      after.toString(),
      input.sourceId,
      input.description,
      input.externalProvider ?? null,
      input.externalPaymentId ?? null,
    ],
  );
  await em.query(
    `UPDATE teams SET credit_balance_micros = $2, updated_at = now() WHERE id = $1
     RETURNING pg_notify('${CACHE_CHANNEL}', 'balance:' || id || '=' || credit_balance_micros)`,
    [input.teamId, after.toString()],
  );
  return { entryId, balanceAfterMicros: after, applied: true };
}

/**
 * The signup grant of a team created in this transaction (`AccountService.openAccount`): one
 * `grant` entry of `micros` whose balance after is `micros` (the new team's balance was set to it
 * on insert), source `signup:<team id>`. Nothing is written for a zero grant.
 */
export async function appendSignupGrant(em: EntityManager, teamId: string, micros: bigint): Promise<void> {
  if (micros <= 0n) return;
  await em.query(
    `INSERT INTO credit_ledger (id, team_id, type, amount_micros, balance_after_micros, source_id, description)
     VALUES ($1, $2, 'grant', $3, $3, $4, 'Signup credit')`,
    [uuidv7(), teamId, micros.toString(), `signup:${teamId}`],
  );
}

/**
 * Usage charges as data-modifying CTEs of the metering group commit (`MeteringService.write`):
 * one statement, one round trip, atomic with the activity rows they charge for.
 *
 * Reads a CTE named `billable`: one row per newly recorded request with a cost (`id` the request
 * id, `team_id`, `cost_micros`, `model`, `endpoint`, `ledger_id` the entry's id, `running`: the
 * sum of the team's costs so far in ledger id order, and `full_cost`: the request's cost before
 * its API key's budget capped it into `cost_micros`, `key-budget.service.ts`). Defines:
 * - `locked`: the teams charged, `before` = their balance, rows locked FOR NO KEY UPDATE (so
 *   concurrent flushes serialise; FOR UPDATE would also block the foreign-key checks of other
 *   flushes' inserts, which hold FOR KEY SHARE on the same team rows, and deadlock);
 * - `charges`: `billable` with `charged` = `min(cost, max(0, before − (running − cost)))` and
 *   `balance_after` = `max(0, before − running)`: the balance never goes below zero and a charge
 *   that would cross it is capped;
 * - `ledger`: the `usage` entries inserted (negative `charged`, source the request id; the
 *   description says when a cap applied), in ledger id order so their created_at follows their
 *   balance_after; returns `source_id` (the request id), `charged` and `balance_after` (text, micro-USD):
 *   the group commit's answer;
 * - `balances`: the teams' new balances, each announced on the cache bus (`balance:<team>=<micros>`).
 */
export const USAGE_CHARGE_CTES = `locked AS (
  SELECT id, credit_balance_micros AS before FROM teams
   WHERE id IN (SELECT team_id FROM billable)
   ORDER BY id
     FOR NO KEY UPDATE
),
charges AS (
  SELECT b.*, LEAST(b.cost_micros, GREATEST(0, l.before - (b.running - b.cost_micros))) AS charged,
         GREATEST(0, l.before - b.running) AS balance_after
    FROM billable b JOIN locked l ON l.id = b.team_id
),
ledger AS (
  INSERT INTO credit_ledger (id, team_id, type, amount_micros, balance_after_micros, source_id, description)
  SELECT ledger_id, team_id, 'usage', -charged, balance_after, id::text,
         model || ' ' || endpoint ||
         CASE WHEN charged < cost_micros THEN ' (cost ' || cost_micros || ' capped at the balance)'
              WHEN cost_micros < full_cost THEN ' (cost ' || full_cost || ' capped at the API key''s budget)'
              ELSE '' END
    FROM charges
   ORDER BY team_id, ledger_id
  RETURNING source_id, (-amount_micros)::text AS charged, balance_after_micros::text AS balance_after
),
balances AS (
  UPDATE teams t SET credit_balance_micros = GREATEST(0, l.before - s.total), updated_at = now()
    FROM locked l JOIN (SELECT team_id, sum(cost_micros) AS total FROM billable GROUP BY team_id) s
         ON s.team_id = l.id
   WHERE t.id = l.id
  RETURNING t.id, pg_notify('${CACHE_CHANNEL}', 'balance:' || t.id || '=' || t.credit_balance_micros)
)`;

/**
 * Whether the team's ledger holds anything but its own signup grant (a team with payments or
 * usage is not removed): an SQL condition on the team id as `$1`.
 */
export const TEAM_LEDGER_USED = `EXISTS (SELECT 1 FROM credit_ledger
                       WHERE team_id = $1 AND NOT (type = 'grant' AND source_id = 'signup:' || $1::text))`;

/** One entry as the transactions list shows it (amounts as text, micro-USD). */
export interface LedgerRow {
  id: string;
  created_at: Date;
  type: LedgerEntryType;
  amount_micros: string;
  balance_after_micros: string;
  description: string;
  external_provider: string | null;
  external_payment_id: string | null;
}

/** Whether `entryId` is an entry of `teamId`'s ledger (a `starting_after` cursor). */
export async function isLedgerEntryOf(db: Queryable, entryId: string, teamId: string): Promise<boolean> {
  const rows = await queryRows(db, "SELECT 1 FROM credit_ledger WHERE id = $1 AND team_id = $2", [entryId, teamId]);
  return rows.length > 0;
}

/**
 * A page of the team's ledger, newest first (`created_at`, `id`), after the entry `startingAfter`
 * when given; `limit` rows at most.
 */
export function ledgerPage(
  db: Queryable,
  teamId: string,
  startingAfter: string | null,
  limit: number,
): Promise<LedgerRow[]> {
  return queryRows<LedgerRow>(
    db,
    `SELECT id, created_at, type, amount_micros::text, balance_after_micros::text, description,
            external_provider, external_payment_id
       FROM credit_ledger
      WHERE team_id = $1
        AND ($2::uuid IS NULL OR (created_at, id) < (SELECT created_at, id FROM credit_ledger WHERE id = $2::uuid))
      ORDER BY created_at DESC, id DESC
      LIMIT $3`,
    [teamId, startingAfter, limit],
  );
}
