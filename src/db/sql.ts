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
  end(...args: unknown[]): unknown;
  /** Set by node-postgres once `end` was called. */
  ending?: boolean;
}

/** The connection a pool keeps for `queryPrepared` between calls. */
interface Kept {
  /** Undefined while it is being taken. */
  connection?: PooledConnection;
  /** A call runs on it. */
  busy: boolean;
  /** It failed or was lost: released with this error when its call ends (at once when idle). */
  lost?: Error;
  /** Our listener for its errors while we hold it (removed when it goes back). */
  onError?: (err: Error) => void;
  /** Given back: its later errors are the pool's to hear, and it is never released twice. */
  returned?: boolean;
}

/** The connection each pool keeps for `queryPrepared` (see there). */
const kept = new WeakMap<NamedStatementPool, Kept>();
/** Pools whose `end` first gives the kept connection back. */
const endPatched = new WeakSet<NamedStatementPool>();

/**
 * Gives the kept connection of `pool` back to it (with `err`: closed), and keeps none. Once only:
 * a lost connection can report more than one error (PostgreSQL's termination notice, then the
 * socket's end), and a second release throws inside node-postgres's event handler, which ended
 * the process (seen when PostgreSQL shut down under an idle kept connection).
 */
function giveBack(pool: NamedStatementPool, entry: Kept, err?: Error): void {
  if (kept.get(pool) === entry) kept.delete(pool);
  const connection = entry.connection;
  if (!connection || entry.returned) return;
  entry.returned = true;
  // The pool listens for its errors from the release on (node-postgres's idle listener).
  if (entry.onError) connection.off("error", entry.onError);
  connection.release(err);
}

/**
 * A connection for one `queryPrepared` call: the one `pool` keeps (taken from it on first use),
 * or, while a call runs on that one, a connection of its own (`own`: released after the call).
 */
async function connectionFor(pool: NamedStatementPool): Promise<{ connection: PooledConnection; entry?: Kept }> {
  const entry = kept.get(pool);
  if (entry?.connection && !entry.busy && !entry.lost && !pool.ending) {
    entry.busy = true;
    return { connection: entry.connection, entry };
  }
  if (entry || pool.ending) return { connection: await pool.connect() };
  const fresh: Kept = { busy: true };
  kept.set(pool, fresh);
  try {
    fresh.connection = await pool.connect();
  } catch (err) {
    kept.delete(pool);
    throw err;
  }
  // A kept connection is checked out: no pool listens for its errors. Lost while idle, it goes
  // back at once (closed); lost during a call, that call fails and gives it back.
  fresh.onError = (err) => {
    fresh.lost ??= err;
    if (!fresh.busy) giveBack(pool, fresh, err);
  };
  fresh.connection.on("error", fresh.onError);
  if (!endPatched.has(pool)) {
    endPatched.add(pool);
    const end = pool.end.bind(pool);
    // The pool ends once every connection is back: the kept one first (an idle one now; one
    // in a call when the call ends).
    pool.end = (...args: unknown[]) => {
      const current = kept.get(pool);
      if (current && !current.busy) giveBack(pool, current);
      return end(...args);
    };
  }
  return { connection: fresh.connection, entry: fresh };
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
 *
 * Each pool keeps one connection for these calls (taken on first use, given back when it fails
 * or the pool ends; a call that finds it busy takes another for itself): the group commit, one
 * flush at a time, always runs on the same connection, so its statements are parsed and planned
 * there only, once per shape and once after each invalidation (an ANALYZE of a table it writes),
 * instead of on every connection of the pool in turn (issue 30, item 2: with 20 connections,
 * planning was a fifth of PostgreSQL's time under the gateway bench).
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
  const { connection, entry } = await connectionFor(pool);
  let failure: Error | undefined;
  // A connection lost between statements reports it here (unheard, it would throw); the statement
  // under way fails with it too.
  const onError = (err: Error) => (failure ??= err);
  if (!entry) connection.on("error", onError);
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
    if (!entry) {
      connection.off("error", onError);
      connection.release(failure);
    } else {
      entry.busy = false;
      const lost = failure ?? entry.lost;
      if (lost) giveBack(pool, entry, lost);
      else if (pool.ending) giveBack(pool, entry);
    }
  }
}
