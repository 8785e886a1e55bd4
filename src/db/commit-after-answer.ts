/**
 * One named prepared statement in a transaction of its own, committed only once its answer is
 * back, in two round trips instead of three (issue 30, item 2; `queryPrepared` in `sql.ts` uses
 * it). A node-postgres submittable, written on the wire as the extended query protocol allows:
 *
 * 1. `Parse` (the first time on a connection), `Bind`, `Describe`, `Execute`, `Flush`: PostgreSQL
 *    runs the statement in an implicit transaction and answers its rows and `CommandComplete`,
 *    but without a `Sync` it does not end that transaction: it waits, holding it open.
 * 2. `Sync`, sent when the answer is complete: PostgreSQL commits and answers `ReadyForQuery`.
 *
 * So no `BEGIN` round trip, and the commit is still the client's decision, taken after the answer
 * came back: the guarantee of issue 28, item 1 holds as with `BEGIN`/`COMMIT`. A statement the
 * database circuit abandons before its answer (PostgreSQL frozen under it) has its connection
 * closed with no `Sync` sent, and PostgreSQL rolls it back when it sees that; the `Sync` is sent
 * only when `beforeCommit` (set by the pool guard, `pool-guard.ts`) agrees, and from then on the
 * circuit waits for it as for a `COMMIT`.
 *
 * Not one round trip: the only thing that can tell PostgreSQL "the caller still waits" after the
 * statement ran is a message sent after its answer, which is a round trip. (A deadline inside the
 * statement would commit on PostgreSQL's clock against the caller's, and a freeze between its
 * check and the commit record would still commit unseen; bench/NOTES.md, session 14.)
 */
import pg from "pg";

/** The protocol side of a node-postgres connection, as a submittable drives it. */
interface WireConnection {
  parsedStatements: Record<string, string>;
  submittedNamedStatements?: Record<string, string>;
  stream: { cork?(): void; uncork?(): void; writable?: boolean };
  parse(msg: { text: string; name: string }): void;
  bind(msg: { statement: string; values: unknown[]; valueMapper: (value: unknown) => unknown }): void;
  describe(msg: { type: "P"; name: string }): void;
  execute(msg: { portal: string; rows: number }): void;
  flush(): void;
  sync(): void;
}

/** node-postgres' result builder (`pg.Result`): fields and rows parsed with the client's types. */
interface ResultBuilder {
  rows: unknown[];
  addFields(fields: unknown[]): void;
  parseRow(fields: unknown[]): unknown;
  addRow(row: unknown): void;
}

const { Result, utils } = pg as unknown as {
  Result: new () => ResultBuilder;
  utils: { prepareValue(value: unknown): unknown };
};

/** Called once: with the error, or with the statement's rows once it is committed. */
export type CommitCallback = (err: Error | undefined, rows?: unknown[]) => void;

/**
 * The submittable (pass it to a pool connection's `query`, with `callback` set). Its rows are
 * parsed as node-postgres parses a query's. A statement that fails is rolled back (its `Sync`
 * ends the failed transaction); a commit that fails reports its error.
 */
export class CommitAfterAnswer {
  /** Tells the pool guard to watch it as a statement until its commit, then as a commit. */
  readonly commitAware = true;
  callback?: CommitCallback;
  /**
   * Asked when the answer is complete, just before the `Sync` that commits: false (the work was
   * given up) leaves the transaction uncommitted (the guard closes the connection).
   */
  beforeCommit?: () => boolean;
  /** Named as node-postgres names a query's result builder, which it gives the client's types. */
  readonly _result = new Result();
  private failed?: Error;
  private synced = false;
  private done = false;

  constructor(
    readonly name: string,
    readonly text: string,
    readonly values: unknown[],
  ) {}

  /** node-postgres: write the messages (one write, corked). */
  submit(connection: WireConnection): null {
    connection.stream.cork?.();
    try {
      if (connection.parsedStatements[this.name] === undefined) {
        connection.parse({ text: this.text, name: this.name });
        if (connection.submittedNamedStatements) connection.submittedNamedStatements[this.name] = this.text;
      }
      connection.bind({ statement: this.name, values: this.values, valueMapper: utils.prepareValue });
      connection.describe({ type: "P", name: "" });
      connection.execute({ portal: "", rows: 0 });
      connection.flush();
    } finally {
      connection.stream.uncork?.();
    }
    return null;
  }

  handleRowDescription(msg: { fields: unknown[] }): void {
    this._result.addFields(msg.fields);
  }

  handleDataRow(msg: { fields: unknown[] }): void {
    if (this.failed) return;
    try {
      this._result.addRow(this._result.parseRow(msg.fields));
    } catch (err) {
      this.failed = err instanceof Error ? err : new Error(String(err));
    }
  }

  /** The statement's answer is complete: commit, unless its rows could not be read or the work was given up. */
  handleCommandComplete(_msg: unknown, connection: WireConnection): void {
    if (this.failed) {
      // No Sync: the caller closes the connection and PostgreSQL rolls the transaction back.
      this.finish(this.failed);
      return;
    }
    if (this.beforeCommit && !this.beforeCommit()) return;
    this.synced = true;
    connection.sync();
  }

  handleEmptyQuery(connection: WireConnection): void {
    this.handleCommandComplete(undefined, connection);
  }

  /** An error from the server (the statement's or the commit's) or from the connection. */
  handleError(err: Error, connection: WireConnection): void {
    // PostgreSQL skips everything up to a Sync after an error: ours ends the failed transaction.
    if (!this.synced && err instanceof pg.DatabaseError && connection.stream.writable !== false) {
      this.synced = true;
      try {
        connection.sync();
      } catch {
        /* the connection is going: PostgreSQL rolls back */
      }
    }
    this.finish(err);
  }

  /** Committed. */
  handleReadyForQuery(): void {
    this.finish(undefined, this._result.rows);
  }

  handlePortalSuspended(): void {
    /* not asked for: Execute without a row limit */
  }

  handleCopyInResponse(connection: { sendCopyFail(msg: string): void }): void {
    connection.sendCopyFail("No source stream defined");
  }

  handleCopyData(): void {
    /* never asked for */
  }

  private finish(err: Error | undefined, rows?: unknown[]): void {
    if (this.done) return;
    this.done = true;
    this.callback?.(err, rows);
  }
}
