/**
 * Does a PostgreSQL URL keep sessions? (issue 31, item 3). Migrations' session advisory lock,
 * the cache bus's LISTEN and pg-boss need one server session per client connection; a
 * transaction-mode pooler (PgBouncer `pool_mode = transaction`) hands each transaction whatever
 * server connection is free, so a lock would be taken by one session and released (or not) by
 * another, and a LISTEN would be heard by a server connection nobody reads.
 */
import pg from "pg";

/** Raised when `url` is a transaction-mode pooler where a session is needed. */
export class NoSessionError extends Error {
  constructor(
    readonly url: string,
    readonly purpose: string,
  ) {
    super(
      `${redact(url)} does not keep a session (a transaction-mode pooler such as PgBouncer with ` +
        `pool_mode = transaction?), and ${purpose} needs one: set DATABASE_DIRECT_URL to PostgreSQL ` +
        `itself (or a session-mode pooler); DATABASE_URL may stay on the pooler`,
    );
    this.name = "NoSessionError";
  }
}

/** `url` without its password, for messages. */
export function redact(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = "***";
    return u.toString();
  } catch {
    return "the database URL";
  }
}

/**
 * Checks that two client connections to `url` are two server sessions: client A asks for its
 * backend's pid, then B, then A again. On PostgreSQL (or a session-mode pooler) A sees its own
 * pid twice and B another; through a transaction-mode pooler B is handed the server connection A
 * just let go (PgBouncer reuses the most recent one) or A comes back on another. Never refuses a
 * real session; under heavy load on the pooler it may miss one (each client then landing on a
 * server of its own by chance), so it is a start-up guard, not a proof.
 * @throws NoSessionError when the pids show pooling; the driver's error when `url` is unreachable.
 */
export async function assertSession(url: string, purpose: string): Promise<void> {
  const client = () =>
    new pg.Client({ connectionString: url, application_name: "switchyard-probe", connectionTimeoutMillis: 10_000 });
  const a = client();
  const b = client();
  const pid = async (c: pg.Client) => (await c.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0].pid;
  try {
    await a.connect();
    await b.connect();
    const first = await pid(a);
    const other = await pid(b);
    const again = await pid(a);
    if (first === other || first !== again) throw new NoSessionError(url, purpose);
  } finally {
    await Promise.all([a.end().catch(() => undefined), b.end().catch(() => undefined)]);
  }
}
