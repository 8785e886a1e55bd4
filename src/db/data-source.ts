/**
 * The TypeORM DataSource (PostgreSQL, `synchronize` never on) and start-up migration.
 */
import type pg from "pg";
import type { Logger } from "pino";
import { DataSource, MigrationExecutor } from "typeorm";
import { entities } from "../entities/index.js";
import { Initial1763769600000 } from "./migrations/1763769600000-initial.js";
import { CreditLeases1764000000000 } from "./migrations/1764000000000-credit-leases.js";
import { BackgroundResponses1764100000000 } from "./migrations/1764100000000-background-responses.js";
import { CompletionEvents1764200000000 } from "./migrations/1764200000000-completion-events.js";
import { Webhooks1764300000000 } from "./migrations/1764300000000-webhooks.js";
import { Streams1764400000000 } from "./migrations/1764400000000-streams.js";
import { WebhookToken1764450000000 } from "./migrations/1764450000000-webhook-token.js";
import { Batches1764500000000 } from "./migrations/1764500000000-batches.js";
import { MailOutbox1764550000000 } from "./migrations/1764550000000-mail-outbox.js";
import { PasswordReset1764600000000 } from "./migrations/1764600000000-password-reset.js";
import { OAuthIdentities1764610000000 } from "./migrations/1764610000000-oauth-identities.js";
import { Teams1764620000000 } from "./migrations/1764620000000-teams.js";
import { Models1764700000000 } from "./migrations/1764700000000-models.js";
import { RateLimits1764710000000 } from "./migrations/1764710000000-rate-limits.js";
import { ActivityReads1764730000000 } from "./migrations/1764730000000-activity-reads.js";
import { OpenInvitations1764745000000 } from "./migrations/1764745000000-open-invitations.js";
import { ModelPrices1764750000000 } from "./migrations/1764750000000-model-prices.js";
import { BillingPayments1764760000000 } from "./migrations/1764760000000-billing-payments.js";
import { UsageDaily1764770000000 } from "./migrations/1764770000000-usage-daily.js";
import { BodyRetention1764820000000 } from "./migrations/1764820000000-body-retention.js";
import { BillingProviderCalls1764830000000 } from "./migrations/1764830000000-billing-provider-calls.js";
import { ActivityInFlight1764840000000 } from "./migrations/1764840000000-activity-in-flight.js";
import { ShortfallCollection1764840000001 } from "./migrations/1764840000001-shortfall-collection.js";
import { BatchItemBodyText1764850000000 } from "./migrations/1764850000000-batch-item-body-text.js";
import { ActivityCounts1764880000000 } from "./migrations/1764880000000-activity-counts.js";
import { ActivityFilterIndexes1764881000000 } from "./migrations/1764881000000-activity-filter-indexes.js";
import { UsageDailyCovering1764882000000 } from "./migrations/1764882000000-usage-daily-covering.js";
import { PlatformModelRequests1764883000000 } from "./migrations/1764883000000-platform-model-requests.js";
import { WebhookRedelivery1764890000000 } from "./migrations/1764890000000-webhook-redelivery.js";
import { ApiKeyPolicy1764905000000 } from "./migrations/1764905000000-api-key-policy.js";
import { ActivityRollupsInFlush1764910000000 } from "./migrations/1764910000000-activity-rollups-in-flush.js";
import type { DatabaseCircuit } from "./circuit.js";
import { guardPool, guardedClientClass } from "./pool-guard.js";
import { NoSessionError, assertSession } from "./session.js";
import { checkPooledSessionTimeouts, setPooledSessionTimeouts } from "./pooled-timeouts.js";
import { useUnnamedStatements } from "./sql.js";

/** Migrations in the order they apply; append only. */
export const migrations = [
  Initial1763769600000,
  CreditLeases1764000000000,
  BackgroundResponses1764100000000,
  CompletionEvents1764200000000,
  Webhooks1764300000000,
  Streams1764400000000,
  WebhookToken1764450000000,
  Batches1764500000000,
  MailOutbox1764550000000,
  PasswordReset1764600000000,
  OAuthIdentities1764610000000,
  Teams1764620000000,
  Models1764700000000,
  RateLimits1764710000000,
  ActivityReads1764730000000,
  OpenInvitations1764745000000,
  ModelPrices1764750000000,
  BillingPayments1764760000000,
  UsageDaily1764770000000,
  BodyRetention1764820000000,
  BillingProviderCalls1764830000000,
  ActivityInFlight1764840000000,
  ShortfallCollection1764840000001,
  BatchItemBodyText1764850000000,
  ActivityCounts1764880000000,
  ActivityFilterIndexes1764881000000,
  UsageDailyCovering1764882000000,
  PlatformModelRequests1764883000000,
  WebhookRedelivery1764890000000,
  ApiKeyPolicy1764905000000,
  ActivityRollupsInFlush1764910000000,
];

/**
 * Server-side bounds of every session of a pool, ms (issue 28, item 1; config `dbStatementTimeoutMs`,
 * `dbLockTimeoutMs`, `dbIdleInTxTimeoutMs`). Sent as startup parameters when a connection
 * opens; 0 leaves the server's own setting (PostgreSQL's default: none).
 */
export interface SessionTimeouts {
  /** `statement_timeout`: a statement running longer is cancelled (SQLSTATE 57014). */
  statementTimeoutMs: number;
  /** `lock_timeout`: a wait for a lock longer than this fails (55P03). */
  lockTimeoutMs: number;
  /** `idle_in_transaction_session_timeout`: a session idle this long inside a transaction is closed (25P03). */
  idleInTransactionTimeoutMs: number;
}

/** The defaults of the configuration (`src/config/config.ts`). */
export const DEFAULT_SESSION_TIMEOUTS: SessionTimeouts = {
  statementTimeoutMs: 30_000,
  lockTimeoutMs: 10_000,
  idleInTransactionTimeoutMs: 60_000,
};

/** node-postgres connection settings for `timeouts` (node-postgres sends none that is 0). */
export function sessionSettings(timeouts: SessionTimeouts): {
  statement_timeout: number;
  lock_timeout: number;
  idle_in_transaction_session_timeout: number;
} {
  return {
    statement_timeout: timeouts.statementTimeoutMs,
    lock_timeout: timeouts.lockTimeoutMs,
    idle_in_transaction_session_timeout: timeouts.idleInTransactionTimeoutMs,
  };
}

/** Options of `createDataSource` and `openDatabase`. */
export interface DatabaseOptions {
  /** Most pg connections. */
  poolSize?: number;
  /** Bounds of every session (default `DEFAULT_SESSION_TIMEOUTS`). */
  timeouts?: SessionTimeouts;
  /** Most time to get a connection (a new one, or a free one of a full pool), ms (default 10 s). */
  connectTimeoutMs?: number;
  /** The database circuit its pool runs under (`circuit.ts`); none in tools and tests. */
  circuit?: DatabaseCircuit;
  /**
   * DATABASE_DIRECT_URL (issue 31, item 3): the migrations and their advisory lock go there, and
   * `url` may be a transaction-mode pooler (its pool then sends unnamed statements only and no
   * session timeouts as startup parameters, which PgBouncer refuses: they are set on the role,
   * `pooled-timeouts.ts`).
   */
  directUrl?: string;
  /** Send `timeouts` as startup parameters (default true; false behind a pooler). */
  startupTimeouts?: boolean;
  /** Where a pooled setup's warnings go (the pooled sessions' timeouts: `pooled-timeouts.ts`). */
  logger?: Pick<Logger, "warn">;
}

/** Creates (does not initialise) a DataSource for `url`. */
export function createDataSource(url: string, poolSizeOrOptions: number | DatabaseOptions = {}): DataSource {
  const opts = typeof poolSizeOrOptions === "number" ? { poolSize: poolSizeOrOptions } : poolSizeOrOptions;
  return new DataSource({
    type: "postgres",
    url,
    entities,
    migrations,
    migrationsTableName: "migrations",
    synchronize: false,
    migrationsRun: false,
    logging: false,
    extra: {
      max: opts.poolSize ?? 20,
      application_name: "switchyard",
      // A connection that cannot be had in time fails the query instead of hanging it (unreachable host).
      connectionTimeoutMillis: opts.connectTimeoutMs ?? 10_000,
      keepAlive: true,
      ...(opts.startupTimeouts === false ? {} : sessionSettings(opts.timeouts ?? DEFAULT_SESSION_TIMEOUTS)),
      ...(opts.circuit ? { Client: guardedClientClass(opts.circuit) } : {}),
    },
  });
}

/** Advisory-lock key that serialises migrations across processes sharing one database. */
const MIGRATION_LOCK = 7_240_611;

/**
 * Initialises the DataSource (its pool under `options.circuit` when given) and applies pending
 * migrations (each in its own transaction) on one session holding a PostgreSQL advisory lock, so
 * that several processes starting at once migrate one at a time. With `options.directUrl` the
 * migrations and their lock go there and `url` may be a transaction-mode pooler (`openPooled`).
 *
 * The migration session has no statement or lock timeout (issue 28, item 1: long-but-legitimate
 * work gets its own bound): it waits on the advisory lock for as long as another process migrates,
 * and a migration lasts as long as its data needs (an index build, the backfill of a roll-up such
 * as `usage_daily` on a large `activity`). Migrations run once per deploy, at start, watched by
 * whoever deploys; a bound would only fail the deploy halfway, to be retried at every restart.
 * @throws NoSessionError when the URL the lock is taken through does not keep a session; the
 *   driver's error when the database is unreachable or a migration fails.
 */
export async function openDatabase(url: string, poolSizeOrOptions: number | DatabaseOptions = {}): Promise<DataSource> {
  const opts = typeof poolSizeOrOptions === "number" ? { poolSize: poolSizeOrOptions } : poolSizeOrOptions;
  if (opts.directUrl !== undefined) return openPooled(url, opts, opts.directUrl);
  await assertSession(url, "the migrations' advisory lock");
  // The migration session holds one connection; TypeORM may ask for another meanwhile.
  const ds = createDataSource(url, { ...opts, poolSize: Math.max(2, opts.poolSize ?? 20) });
  await ds.initialize();
  if (opts.circuit) guardPool((ds.driver as unknown as { master: pg.Pool }).master, opts.circuit);
  const session = ds.createQueryRunner();
  let unlocked = true;
  try {
    await session.connect();
    await session.query("SET statement_timeout = 0");
    await session.query("SET lock_timeout = 0");
    await session.query("SELECT pg_advisory_lock($1)", [MIGRATION_LOCK]);
    const executor = new MigrationExecutor(ds, session);
    executor.transaction = "each";
    await executor.executePendingMigrations();
    const [row] = (await session.query("SELECT pg_advisory_unlock($1) AS unlocked", [MIGRATION_LOCK])) as Array<{
      unlocked: boolean;
    }>;
    unlocked = row.unlocked;
    // Back to the pool's bounds before the connection goes back to it.
    await session.query("RESET statement_timeout");
    await session.query("RESET lock_timeout");
  } catch (err) {
    await session.release();
    await ds.destroy();
    throw err;
  }
  await session.release();
  if (!unlocked) {
    // Taken by one server session, released on another: a transaction-mode pooler that the
    // session probe missed. The lock stays held by a pooled server connection: say so loudly.
    await ds.destroy();
    throw new NoSessionError(url, "the migrations' advisory lock (taken and released on different sessions)");
  }
  return ds;
}

/**
 * With a transaction-mode pooler (issue 31, item 3): migrates through `directUrl` (a session,
 * for the advisory lock), then opens the pool on `url` with unnamed statements only and no
 * startup timeouts (PgBouncer refuses unknown startup parameters): the timeouts are set as the
 * role's defaults in the database through the direct session, and checked through the pool.
 */
async function openPooled(url: string, opts: DatabaseOptions, directUrl: string): Promise<DataSource> {
  const timeouts = sessionSettings(opts.timeouts ?? DEFAULT_SESSION_TIMEOUTS);
  const migrator = await openDatabase(directUrl, { ...opts, poolSize: 2, directUrl: undefined, circuit: undefined });
  try {
    // The pooled sessions' timeouts, as the role's defaults (`pooled-timeouts.ts`).
    await setPooledSessionTimeouts(migrator, timeouts);
  } catch (err) {
    opts.logger?.warn({ err }, "could not set the pooled sessions' timeouts on the database role");
  } finally {
    await migrator.destroy();
  }
  const ds = createDataSource(url, { ...opts, startupTimeouts: false });
  await ds.initialize();
  if (opts.circuit) guardPool((ds.driver as unknown as { master: pg.Pool }).master, opts.circuit);
  useUnnamedStatements(ds);
  await checkPooledSessionTimeouts(ds, timeouts, opts.logger);
  return ds;
}
