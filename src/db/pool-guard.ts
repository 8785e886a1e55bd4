/**
 * Puts node-postgres pools under the database circuit (`circuit.ts`; issue 28, item 1): every
 * wait for a pool connection and every query of their clients is watched, refused at once while
 * the circuit is open, and abandoned when it opens under them.
 *
 * An abandoned or refused query closes its connection (the pool then drops it): the server rolls
 * back the transaction it was in when it sees the connection gone, and no connection in an
 * unknown state (half a transaction, a statement still running) goes back to the pool.
 * Other submittables (cursors, streams) pass unwatched: nothing here uses them. A commit-aware one
 * (`commit-after-answer.ts`) is watched as a query until it commits, then as a `COMMIT`.
 */
import pg from "pg";
import type { AppError } from "../shared/errors.js";
import type { DatabaseCircuit, OperationKind } from "./circuit.js";

type QueryCallback = (err: Error | undefined, result?: unknown) => void;
type RawQuery = (config: unknown, values?: unknown, callback?: QueryCallback) => unknown;
type ConnectCallback = (err: Error | undefined, client?: pg.PoolClient, release?: (err?: Error) => void) => void;

const noop = () => undefined;

/** `COMMIT` (or `END`), the statements whose outcome the circuit waits for. */
const COMMIT = /^\s*(commit|end)(\s+(work|transaction))?\s*;?\s*$/i;

function kindOf(config: unknown): OperationKind {
  const text = typeof config === "string" ? config : (config as { text?: unknown } | null)?.text;
  return typeof text === "string" && COMMIT.test(text) ? "commit" : "query";
}

/** Closes `client`'s connection now; with `_ending` set first, node-postgres raises no 'error' for it. */
function disconnect(client: pg.Client): void {
  void client.end().catch(noop);
  (client as unknown as { connection?: { stream?: { destroy(): void } } }).connection?.stream?.destroy();
}

/** A promise and its node-style callback, or the caller's callback (then no promise). */
function settleWith<C extends (err: Error | undefined, ...rest: never[]) => void>(
  callback: C | undefined,
  toPromise: (resolve: (v: unknown) => void, reject: (e: Error) => void) => C,
): { deliver: C; result: Promise<unknown> | undefined } {
  if (callback) return { deliver: callback, result: undefined };
  let deliver!: C;
  const result = new Promise<unknown>((resolve, reject) => {
    deliver = toPromise(resolve, reject);
  });
  return { deliver, result };
}

/** A submittable that commits its own transaction (`commit-after-answer.ts`). */
interface CommitAwareSubmittable {
  commitAware: true;
  callback?: QueryCallback;
  beforeCommit?: () => boolean;
}

function isCommitAware(config: unknown): config is CommitAwareSubmittable {
  return (config as { commitAware?: unknown } | null)?.commitAware === true;
}

/**
 * A commit-aware submittable under the circuit: refused while open; watched as a `query` until it
 * asks to commit (`beforeCommit`: refused once abandoned), then as a `commit`.
 */
function guardedCommit(client: pg.Client, raw: RawQuery, circuit: DatabaseCircuit, config: CommitAwareSubmittable) {
  const deliver = config.callback ?? noop;
  const refused = circuit.refusal();
  if (refused) {
    disconnect(client);
    process.nextTick(() => deliver(refused));
    return config;
  }
  let settled = false;
  const op = circuit.watch("query", (err: AppError) => {
    if (settled) return;
    settled = true;
    deliver(err);
    disconnect(client);
  });
  config.beforeCommit = () => !settled && op.committing();
  config.callback = (err, res) => {
    op.end(err ?? undefined);
    if (settled) return;
    settled = true;
    deliver(err ?? undefined, res);
  };
  return raw(config);
}

/** `client.query` under the circuit: refused while open, watched, abandoned when it opens. */
function guardedQuery(
  client: pg.Client,
  raw: RawQuery,
  circuit: DatabaseCircuit,
  config: unknown,
  values?: unknown,
  callback?: QueryCallback,
): unknown {
  if (isCommitAware(config)) return guardedCommit(client, raw, circuit, config);
  if (typeof (config as { submit?: unknown } | null)?.submit === "function") return raw(config, values, callback);
  if (typeof values === "function") {
    callback = values as QueryCallback;
    values = undefined;
  }
  const { deliver, result } = settleWith<QueryCallback>(
    callback,
    (resolve, reject) => (err, res) => (err ? reject(err) : resolve(res)),
  );
  const refused = circuit.refusal();
  if (refused) {
    disconnect(client);
    process.nextTick(() => deliver(refused));
    return result;
  }
  let settled = false;
  const op = circuit.watch(kindOf(config), (err: AppError) => {
    if (settled) return;
    settled = true;
    deliver(err);
    disconnect(client);
  });
  raw(config, values, (err, res) => {
    op.end(err ?? undefined);
    if (settled) return;
    settled = true;
    deliver(err ?? undefined, res);
  });
  return result;
}

/**
 * A node-postgres `Client` class whose queries go through `circuit`, for a pool's `Client`
 * option (TypeORM passes it through `extra`), so every connection the pool makes is guarded.
 */
export function guardedClientClass(circuit: DatabaseCircuit): typeof pg.Client {
  return class GuardedClient extends pg.Client {
    constructor(config?: string | pg.ClientConfig) {
      super(config);
      const raw = pg.Client.prototype.query.bind(this) as unknown as RawQuery;
      (this as unknown as { query: RawQuery }).query = (config, values, callback) =>
        guardedQuery(this, raw, circuit, config, values, callback);
    }
  };
}

/**
 * Puts `pool`'s connection checkouts under `circuit` (refused while open, watched, abandoned when
 * it opens: a connection that arrives later goes straight back) and reports the errors of its
 * idle connections to it. The pool's clients should be `guardedClientClass(circuit)`.
 */
export function guardPool(pool: pg.Pool, circuit: DatabaseCircuit): void {
  const connect = pool.connect.bind(pool) as (callback: ConnectCallback) => void;
  (pool as unknown as { connect: (callback?: ConnectCallback) => unknown }).connect = (callback) => {
    const { deliver, result } = settleWith<ConnectCallback>(
      callback,
      (resolve, reject) => (err, client) => (err ? reject(err) : resolve(client)),
    );
    const refused = circuit.refusal();
    if (refused) {
      process.nextTick(() => deliver(refused, undefined, noop));
      return result;
    }
    let settled = false;
    const op = circuit.watch("checkout", (err) => {
      if (settled) return;
      settled = true;
      deliver(err, undefined, noop);
    });
    connect((err, client, release) => {
      op.end(err ?? undefined);
      if (settled) {
        if (!err && client) release?.();
        return;
      }
      settled = true;
      deliver(err ?? undefined, client, release);
    });
    return result;
  };
  pool.on("error", (err) => circuit.report(err));
}
