/**
 * What a team may hold on the model side (issue 9 review, finding 2): at most
 * `maxDeployments` deployments and `maxCustomModels` custom models (config
 * `SWITCHYARD_TEAM_MAX_DEPLOYMENTS`, `SWITCHYARD_TEAM_MAX_CUSTOM_MODELS`), and bringing a model up
 * (a deployment, a custom model's deployment request) needs credit, as every create operation does
 * (DESIGN §3 Money: "a team without credit gets 402 on create operations").
 *
 * The checks run inside the caller's transaction under the team row's lock (`FOR NO KEY UPDATE`,
 * the lock the credit leases and the ledger take), so two creates at once cannot both take the
 * last place.
 */
import type { EntityManager } from "typeorm";
import { queryRows } from "../../db/sql.js";
import { AppError, ErrorCode } from "../../shared/errors.js";

/** Per-team bounds on deployments and custom models. */
export interface ModelQuotas {
  maxDeployments: number;
  maxCustomModels: number;
}

/** What one quota counts. */
type Counted = "deployments" | "custom_models";

const SETTING: Record<Counted, { env: string; noun: string }> = {
  deployments: { env: "SWITCHYARD_TEAM_MAX_DEPLOYMENTS", noun: "deployments" },
  custom_models: { env: "SWITCHYARD_TEAM_MAX_CUSTOM_MODELS", noun: "custom models" },
};

/**
 * Locks the team row for the rest of `em`'s transaction and checks its quota of `table` rows and,
 * with `needsCredit`, that its balance is above zero.
 * @throws AppError 402 (InsufficientCredit) when `needsCredit` and the balance is zero; 409 when
 *   the team already holds `max` rows of `table`.
 */
export async function checkTeamModelQuota(
  em: EntityManager,
  teamId: string,
  table: Counted,
  max: number,
  needsCredit: boolean,
): Promise<void> {
  const [team] = await queryRows<{ balance: string }>(
    em,
    `SELECT credit_balance_micros::text AS balance FROM teams WHERE id = $1 FOR NO KEY UPDATE`,
    [teamId],
  );
  if (!team) throw AppError.unauthenticated();
  if (needsCredit) requireCredit(BigInt(team.balance));
  // A statement of its own, after the lock: under READ COMMITTED it takes a fresh snapshot and
  // sees the rows of every create that held the lock before (a count in the locking statement
  // would use the snapshot taken before waiting, and parallel creates would all pass).
  const [{ n }] = await queryRows<{ n: number }>(em, `SELECT count(*)::int AS n FROM ${table} WHERE team_id = $1`, [
    teamId,
  ]);
  if (n >= max) {
    const s = SETTING[table];
    throw AppError.conflict(
      `The team has ${n} ${s.noun}, the most this server allows (${s.env}=${max}); delete one first`,
    );
  }
}

/**
 * Locks the team row for the rest of `em`'s transaction and checks its balance is above zero.
 * @throws AppError 402 when it is zero.
 */
export async function checkTeamCredit(em: EntityManager, teamId: string): Promise<void> {
  const [team] = await queryRows<{ balance: string }>(
    em,
    `SELECT credit_balance_micros::text AS balance FROM teams WHERE id = $1 FOR NO KEY UPDATE`,
    [teamId],
  );
  if (!team) throw AppError.unauthenticated();
  requireCredit(BigInt(team.balance));
}

function requireCredit(balanceMicros: bigint): void {
  if (balanceMicros > 0n) return;
  throw new AppError(
    ErrorCode.InsufficientCredit,
    "Bringing a model up needs credit and the team's balance is 0 micro-USD; add credit first",
    { required_micros: 1, available_micros: 0 },
  );
}
