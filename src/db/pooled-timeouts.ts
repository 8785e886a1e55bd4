/**
 * Timeouts for the sessions a transaction-mode pooler hands out (issue 28, item 1: "statement,
 * lock and idle-in-transaction timeouts on every pool"; review of session 15). PgBouncer refuses
 * them as startup parameters, so behind it the pool on `DATABASE_URL` used to run with none
 * unless the operator had set them on the role. Switchyard now sets them itself, through the
 * direct session it migrates on, as its role's defaults in its database
 * (`ALTER ROLE CURRENT_USER IN DATABASE … SET …`): every server session the pooler opens from then
 * on starts with them. Sessions that set their own are not affected (the direct pool's startup
 * parameters, the migrations' `SET … = 0`, the job queue's). One role and one database serve both
 * URLs (docs/deploy.md), so the last process to start with other values sets them for all.
 */
import type { Logger } from "pino";
import type { DataSource } from "typeorm";

/**
 * PostgreSQL timeout settings by name (`statement_timeout`, `lock_timeout`,
 * `idle_in_transaction_session_timeout`: `data-source.ts`'s `sessionSettings`), in ms; 0 means
 * none (left as it is).
 */
export type TimeoutSettings = Record<string, number>;

/**
 * Sets `settings` (ms; 0 leaves a setting alone) as the current role's defaults in the current
 * database, through `direct` (a session of the same role and database as the pooled URL).
 * @throws the driver's error when the role may not change its own defaults (the caller logs it).
 */
export async function setPooledSessionTimeouts(direct: DataSource, settings: TimeoutSettings): Promise<void> {
  const [{ db }] = (await direct.query("SELECT current_database() AS db")) as Array<{ db: string }>;
  const quoted = `"${db.replaceAll('"', '""')}"`;
  for (const [name, ms] of Object.entries(settings)) {
    if (ms > 0) await direct.query(`ALTER ROLE CURRENT_USER IN DATABASE ${quoted} SET ${name} = ${Math.round(ms)}`);
  }
}

/**
 * Reads the timeouts a session of `pooled` has and warns, naming the fix, about each configured one
 * it lacks (a pooler's server connection opened before the role's defaults were set keeps none
 * until it reconnects: PgBouncer's `server_lifetime`, or `RECONNECT` on its console).
 * @returns the names of the settings missing (empty when every configured one is there).
 */
export async function checkPooledSessionTimeouts(
  pooled: DataSource,
  settings: TimeoutSettings,
  logger?: Pick<Logger, "warn">,
): Promise<string[]> {
  const wanted = Object.entries(settings).filter(([, ms]) => ms > 0);
  if (wanted.length === 0) return [];
  const [row] = (await pooled.query(
    `SELECT ${wanted.map(([name]) => `current_setting('${name}') AS ${name}`).join(", ")}`,
  )) as Array<Record<string, string>>;
  const missing = wanted.filter(([name]) => row[name] === "0").map(([name]) => name);
  if (missing.length > 0) {
    logger?.warn(
      { missing },
      `the pooled database sessions run without ${missing.join(", ")}: set them on the role ` +
        `(ALTER ROLE … IN DATABASE … SET …) or let the pooler reconnect its server connections`,
    );
  }
  return missing;
}
