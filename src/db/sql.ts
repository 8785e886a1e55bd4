/** Thin helpers for the raw SQL the services run through TypeORM managers. */
import { createHash } from "node:crypto";
import { CommitAfterAnswer } from "./commit-after-answer.js";

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

/** A connection of a node-postgres pool, as `queryPrepared` uses it. */
interface PooledConnection {
  query(submittable: CommitAfterAnswer): unknown;
  release(err?: Error): void;
  on(event: "error", listener: (err: Error) => void): void;
  off(event: "error", listener: (err: Error) => void): void;
}

/** What `queryPrepared` needs of node-postgres: a pool to take a connection from. */
interface NamedStatementPool {
  connect(): Promise<PooledConnection>;
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
 * Runs `text` as a named prepared statement, in a transaction of its own, on a connection of
 * `db`'s pool (a TypeORM DataSource on PostgreSQL): each connection parses and plans it once,
 * later calls only bind and execute. For the large statements of the hot path (the metering group
 * commit: 2.5 ms through a plain query against 0.8 ms prepared, measured in bench/NOTES.md, issue
 * 12 item 1). The name sent is `name` plus a hash of `text`, so one name can never stand for two
 * texts (a changed statement after a deploy, behind a pooler that keeps server connections).
 * Other `Queryable`s (a transaction's manager) run it plainly, inside their transaction, and so
 * does a DataSource marked by `useUnnamedStatements` (one statement, atomic on its own).
 *
 * The statement runs in a transaction of its own, committed only once its answer is back, in two
 * round trips (issue 30, item 2; it was `BEGIN`, the statement, `COMMIT`: three, issue 28 item 1):
 * see `commit-after-answer.ts`. A statement the database circuit abandons (PostgreSQL frozen under
 * it, `circuit.ts`) has its connection closed before its commit was sent, so PostgreSQL rolls it
 * back when it runs again, instead of committing, unseen, what the caller was told had failed (for
 * the group commit: charges for requests answered 503). A commit already sent is waited for by
 * the circuit.
 * Note: a connection whose statement failed is closed, so the next call costs a reconnect and a
 * new parse.
 */
export async function queryPrepared<T>(db: Queryable, name: string, text: string, params: unknown[]): Promise<T[]> {
  if (pooled.has(db)) return queryRows<T>(db, text, params);
  const pool = (db as { driver?: { master?: unknown } }).driver?.master as NamedStatementPool | undefined;
  if (typeof pool?.connect !== "function") return queryRows<T>(db, text, params);
  let named = statementNames.get(text);
  if (named === undefined) {
    named = `${name}_${createHash("sha256").update(text).digest("hex").slice(0, 12)}`;
    statementNames.set(text, named);
  }
  const connection = await pool.connect();
  let failure: Error | undefined;
  // A connection lost between statements reports it here (unheard, it would throw); the statement
  // under way fails with it too.
  const onError = (err: Error) => (failure ??= err);
  connection.on("error", onError);
  try {
    return await new Promise<T[]>((resolve, reject) => {
      const statement = new CommitAfterAnswer(named, text, params);
      statement.callback = (err, rows) => (err ? reject(err) : resolve(rows as T[]));
      connection.query(statement);
    });
  } catch (err) {
    failure = err instanceof Error ? err : new Error(String(err));
    throw err;
  } finally {
    connection.off("error", onError);
    connection.release(failure);
  }
}
