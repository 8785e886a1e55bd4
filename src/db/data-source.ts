/**
 * The TypeORM DataSource (PostgreSQL, `synchronize` never on) and start-up migration.
 */
import { DataSource } from "typeorm";
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
import { NoSessionError, assertSession } from "./session.js";
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
];

/** Creates (does not initialise) a DataSource for `url`. `poolSize` bounds pg connections. */
export function createDataSource(url: string, poolSize = 20): DataSource {
  return new DataSource({
    type: "postgres",
    url,
    entities,
    migrations,
    migrationsTableName: "migrations",
    synchronize: false,
    migrationsRun: false,
    logging: false,
    // A connection that cannot be had in 10 s fails the query instead of hanging it (unreachable host).
    extra: { max: poolSize, application_name: "switchyard", connectionTimeoutMillis: 10_000, keepAlive: true },
  });
}

/** Advisory-lock key that serialises migrations across processes sharing one database. */
const MIGRATION_LOCK = 7_240_611;

/**
 * Initialises the DataSource and applies pending migrations (each in its own transaction), holding
 * a PostgreSQL advisory lock so that several processes starting at once migrate one at a time.
 * With `directUrl` (DATABASE_DIRECT_URL) the migrations and their lock go there and `url` may be a
 * transaction-mode pooler (its DataSource then sends unnamed statements only).
 * @throws NoSessionError when the URL the lock is taken through does not keep a session; the
 *   driver's error when the database is unreachable or a migration fails.
 */
export async function openDatabase(url: string, poolSize = 20, directUrl?: string): Promise<DataSource> {
  if (directUrl !== undefined) return openPooled(url, poolSize, directUrl);
  await assertSession(url, "the migrations' advisory lock");
  // The lock holds one connection while the migrations run on another.
  const ds = createDataSource(url, Math.max(2, poolSize));
  await ds.initialize();
  const lock = ds.createQueryRunner();
  try {
    await lock.connect();
    await lock.query("SELECT pg_advisory_lock($1)", [MIGRATION_LOCK]);
    await ds.runMigrations({ transaction: "each" });
  } catch (err) {
    await lock.release();
    await ds.destroy();
    throw err;
  }
  const [{ unlocked }] = await lock.query("SELECT pg_advisory_unlock($1) AS unlocked", [MIGRATION_LOCK]);
  await lock.release();
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
 * for the advisory lock), then opens the pool on `url` with unnamed statements only.
 */
async function openPooled(url: string, poolSize: number, directUrl: string): Promise<DataSource> {
  const migrator = await openDatabase(directUrl, 2);
  await migrator.destroy();
  const ds = createDataSource(url, poolSize);
  await ds.initialize();
  useUnnamedStatements(ds);
  return ds;
}
