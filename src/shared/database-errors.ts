/**
 * "The database is down" as one error (issue 28, item 1; DESIGN §3 Errors: "A database that
 * cannot be reached or does not answer in time → 503 + `Retry-After`, never 500 and never a
 * hang"). `databaseUnavailable()` builds it; `asDatabaseUnavailable(err)` recognises what
 * node-postgres, pg-pool and TypeORM raise when PostgreSQL is stopped, frozen, restarting,
 * refusing connections or past a timeout, and gives the same 503 for it, so REST
 * (`rest/error-envelope.ts`), GraphQL (`schema/error-formatter.ts`) and metering answer alike.
 * The circuit that refuses work while the database is away is `db/circuit.ts`.
 */
import { AppError, ErrorCode } from "./errors.js";

/**
 * `Retry-After` of a database 503, seconds: the circuit looks again every second while it is
 * open, but a managed PostgreSQL fails over in 10–60 s, and a client's default two retries at 5 s
 * span 10 s of it.
 */
export const DATABASE_RETRY_AFTER_S = 5;

/** The 503 every transport answers while the database is unavailable (reason `database_unavailable`). */
export function databaseUnavailable(detail = "The database is unavailable; retry later"): AppError {
  return new AppError(ErrorCode.DatabaseUnavailable, detail, undefined, DATABASE_RETRY_AFTER_S).because(
    "database_unavailable",
  );
}

/**
 * What answers for the database (the circuit of `db/circuit.ts`): the 503 to answer now while it
 * is unavailable, undefined while it is up.
 */
export interface DatabaseAvailability {
  refusal(): AppError | undefined;
  /** Calls `listener` with the 503 each time the database becomes unavailable. */
  onUnavailable(listener: (refusal: AppError) => void): void;
}

/**
 * SQLSTATEs that say "the server is away or past a bound", not "this statement is wrong":
 * class 08 (connection exception), 53 (insufficient resources: too many connections, disk full,
 * out of memory), 57P01–57P03 (shut down, crashed, starting up), 57014 (canceled: the statement
 * timeout; nothing here cancels otherwise), 55P03 (the lock timeout), 25P03 (the
 * idle-in-transaction timeout) and 25006 (a write on a read-only server: a standby reached after a
 * failover, or a database set read-only for maintenance; a 500 until the issue 28 review). Reads
 * keep working then: the circuit's probe passes and it stays closed, but every write is the 503.
 */
const UNAVAILABLE_SQLSTATE = /^(08...|53...|57P0[123]|57014|55P03|25P03|25006)$/;

/** Socket errors of a connection that could not be made or was lost. */
const UNAVAILABLE_ERRNO = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ECONNABORTED",
  "ETIMEDOUT",
  "EPIPE",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENOTFOUND",
  "EAI_AGAIN",
]);

/**
 * node-postgres and pg-pool errors without a code (pg 8): a connection lost or never made, a
 * connect or checkout past `connectionTimeoutMillis`, a client used after its connection broke.
 */
const UNAVAILABLE_MESSAGE =
  /^(Connection terminated( unexpectedly| due to connection timeout)?|timeout exceeded when trying to connect|timeout expired|Client has encountered a connection error and is not queryable|Client was closed and is not queryable|Query read timeout)$/;

/**
 * True when `err` (or what it wraps: TypeORM's `driverError`, an error's `cause`) says the
 * database is unreachable, shut down, out of connections or past a timeout, rather than that a
 * statement or its data is wrong.
 */
export function isDatabaseUnavailable(err: unknown): boolean {
  for (let e = err, depth = 0; e !== null && typeof e === "object" && depth < 4; depth++) {
    if (e instanceof AppError) return e.code === ErrorCode.DatabaseUnavailable;
    const { code, message } = e as { code?: unknown; message?: unknown };
    if (typeof code === "string" && (UNAVAILABLE_SQLSTATE.test(code) || UNAVAILABLE_ERRNO.has(code))) return true;
    if (typeof message === "string" && UNAVAILABLE_MESSAGE.test(message)) return true;
    const inner = e as { driverError?: unknown; cause?: unknown };
    e = inner.driverError ?? inner.cause;
  }
  return false;
}

/**
 * The 503 for `err` when it says the database is unavailable (`isDatabaseUnavailable`): the
 * circuit's own refusal where `err` is or wraps one, else a new one. Undefined otherwise.
 */
export function asDatabaseUnavailable(err: unknown): AppError | undefined {
  if (!isDatabaseUnavailable(err)) return undefined;
  for (let e = err, depth = 0; e !== null && typeof e === "object" && depth < 4; depth++) {
    if (e instanceof AppError) return e;
    const inner = e as { driverError?: unknown; cause?: unknown };
    e = inner.driverError ?? inner.cause;
  }
  return databaseUnavailable();
}
