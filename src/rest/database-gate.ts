/**
 * The database gate (issue 28, item 1): while the database circuit is open (`db/circuit.ts`),
 * every request of the data plane (`/v1`), the control plane (`/control`) and GraphQL
 * (`/graphql`) is answered 503 with `Retry-After` at once, before its body is read or its
 * credentials looked up — all of them need the database, if only to charge the request. The
 * probes are the exceptions: liveness answers as ever, readiness says "database unreachable" on
 * its own (it asks the same circuit). The answer goes out without the error middleware's 5xx log
 * line: the circuit logs the outage once, when it opens.
 */
import type { RequestHandler } from "express";
import type { DatabaseAvailability } from "../shared/database-errors.js";
import { sendError, sendGraphqlError } from "./error-envelope.js";

/** The prefixes the gate covers (mount `databaseGate` on these). */
export const GATED_PREFIXES = ["/v1", "/control", "/graphql"];

/** Paths under them that answer without the database. */
const PROBES = new Set(["/v1/health", "/v1/health/ready"]);

/** The gate, to mount on `GATED_PREFIXES` before the routes and the body parsers. */
export function databaseGate(database: DatabaseAvailability): RequestHandler {
  return (req, res, next) => {
    const refused = database.refusal();
    if (!refused) return next();
    const path = req.originalUrl.split("?")[0].replace(/\/+$/, "").toLowerCase();
    if (PROBES.has(path)) return next();
    if (path === "/graphql" || path.startsWith("/graphql/")) sendGraphqlError(res, refused);
    else sendError(res, refused);
  };
}
