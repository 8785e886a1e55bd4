/** Thin helpers for the raw SQL the services run through TypeORM managers. */
import { createHash } from "node:crypto";

/** Anything that runs SQL: a DataSource, an EntityManager or a QueryRunner. */
export interface Queryable {
  query(text: string, params?: unknown[]): Promise<unknown>;
}

/**
 * Runs `text` and returns its rows. TypeORM answers UPDATE and DELETE with `[rows, rowCount]`;
 * this always gives the rows.
 */
export async function queryRows<T>(db: Queryable, text: string, params?: unknown[]): Promise<T[]> {
  const raw = await db.query(text, params);
  if (Array.isArray(raw) && raw.length === 2 && Array.isArray(raw[0]) && typeof raw[1] === "number") {
    return raw[0] as T[];
  }
  return raw as T[];
}

/** What `queryPrepared` needs of node-postgres: a pool that runs named statements. */
interface NamedStatementPool {
  query(config: { name: string; text: string; values: unknown[] }): Promise<{ rows: unknown[] }>;
}

/** DataSources whose pool reaches PostgreSQL through a transaction-mode pooler. */
const pooled = new WeakSet<object>();

/**
 * Marks `db` (a DataSource) as reached through a transaction-mode pooler (issue 31, item 3):
 * `queryPrepared` then sends unnamed statements on it. PgBouncer before 1.21 (Debian 12 ships
 * 1.18) hands each transaction any server connection, so a statement prepared on one is missing
 * ("prepared statement … does not exist") on the next.
 */
export function useUnnamedStatements(db: object): void {
  pooled.add(db);
}

/** Statement names by text: `<name>_<12 hex of the text's SHA-256>`. */
const statementNames = new Map<string, string>();

/**
 * Runs `text` as a named prepared statement on a connection of `db`'s pool (a TypeORM
 * DataSource on PostgreSQL): each connection parses and plans it once, later calls only bind and
 * execute. For the large statements of the hot path (the metering group commit: 2.5 ms through a
 * plain query against 0.8 ms prepared, measured in bench/NOTES.md, issue 12 item 1). The name
 * sent is `name` plus a hash of `text`, so one name can never stand for two texts (a changed
 * statement after a deploy, behind a pooler that keeps server connections). Other `Queryable`s
 * (a transaction's manager, a DataSource marked by `useUnnamedStatements`) run it plainly.
 * Note: node-postgres closes a pool connection whose query failed, so a failed call costs a
 * reconnect and a new parse on the next one.
 */
export async function queryPrepared<T>(db: Queryable, name: string, text: string, params: unknown[]): Promise<T[]> {
  if (pooled.has(db)) return queryRows<T>(db, text, params);
  const pool = (db as { driver?: { master?: unknown } }).driver?.master as NamedStatementPool | undefined;
  if (typeof pool?.query !== "function") return queryRows<T>(db, text, params);
  let named = statementNames.get(text);
  if (named === undefined) {
    named = `${name}_${createHash("sha256").update(text).digest("hex").slice(0, 12)}`;
    statementNames.set(text, named);
  }
  const result = await pool.query({ name: named, text, values: params });
  return result.rows as T[];
}
