/**
 * `npm run admin -- migrate` (issue 31, item 5): applies the pending database migrations and exits,
 * as every process does at its start (same advisory lock, through `DATABASE_DIRECT_URL` when set).
 * A deployment runs it once per upgrade, before the new API and worker processes start (the
 * compose file's `migrate` service, the Kubernetes `switchyard-migrate` Job), so no serving
 * process waits on a long migration behind its health probes. Prints how many migrations the
 * database has applied in all.
 *
 * `npm run admin -- create-owner EMAIL [--password PASSWORD] [--name NAME]` (issue 27, item 2):
 * makes the first owner of a server whose signup is `invite` or `closed` (`SWITCHYARD_SIGNUP`).
 * Reads the same configuration as `npm start` (`DATABASE_URL`, `SWITCHYARD_DATA_DIR`, …) and
 * creates the account signup creates — a user who owns a new team with the signup credit — through
 * the same use case (`AccountService.createOwner`), whatever the signup policy.
 *
 * - The password: `--password`, else `SWITCHYARD_ADMIN_PASSWORD`, else a generated one (printed
 *   once). The environment keeps it out of the shell history and the process list.
 * - Idempotent: an email that already has an account is reported (its role and team) and left
 *   unchanged, exit status 0.
 * - The database: `DATABASE_URL`; else the embedded PostgreSQL of the data folder — the one a
 *   running `npm start` serves (so the server need not stop), or started for the command and
 *   stopped after it.
 *
 * Exit status 0 when done (created or already there), 1 for a refused value or an unusable
 * configuration (one line on stderr, no stack trace), 2 for a usage error.
 */
import { randomBytes } from "node:crypto";
import path from "node:path";
import type { DataSource } from "typeorm";
import { type Config, ConfigError, loadConfig } from "../config/config.js";
import { openDatabase } from "../db/data-source.js";
import { EmbeddedPostgresError, runningEmbeddedUrl, startEmbeddedPostgres } from "../db/embedded.js";
import { AccountService } from "../services/accounts/account.service.js";
import { TokenService } from "../services/platform/tokens.js";
import { AppError } from "../shared/errors.js";

const USAGE =
  "usage: npm run admin -- create-owner EMAIL [--password PASSWORD] [--name NAME]\n       npm run admin -- migrate";

class UsageError extends Error {}

/** A command and its arguments. */
type Command = { command: "create-owner"; email: string; password?: string; name?: string } | { command: "migrate" };

/** The command line's command: `create-owner` with its arguments, or `migrate`. @throws UsageError for anything else. */
function parseArgs(args: string[]): Command {
  const [command, ...rest] = args;
  if (command === "migrate") {
    if (rest.length > 0) throw new UsageError(`migrate takes no arguments (got ${rest.join(" ")})`);
    return { command };
  }
  if (command !== "create-owner") throw new UsageError(command ? `unknown command ${command}` : "no command");
  let email: string | undefined;
  let password: string | undefined;
  let name: string | undefined;
  for (let i = 0; i < rest.length; i++) {
    const arg = rest[i];
    const [flag, inline] = arg.startsWith("--") && arg.includes("=") ? arg.split(/=(.*)/s, 2) : [arg, undefined];
    if (flag === "--password" || flag === "--name") {
      const value = inline ?? rest[++i];
      if (value === undefined) throw new UsageError(`${flag} needs a value`);
      if (flag === "--password") password = value;
      else name = value;
    } else if (arg.startsWith("--")) {
      throw new UsageError(`unknown option ${arg}`);
    } else if (email === undefined) {
      email = arg;
    } else {
      throw new UsageError(`one EMAIL only (got ${email} and ${arg})`);
    }
  }
  if (email === undefined) throw new UsageError("create-owner needs an EMAIL");
  return { command, email, password, name };
}

/** The database of `config`, and how to let it go (see the module header). */
async function openStore(config: Config): Promise<{ ds: DataSource; close(): Promise<void> }> {
  if (config.databaseUrl) {
    const ds = await openDatabase(config.databaseUrl, { poolSize: 2, directUrl: config.databaseDirectUrl });
    return { ds, close: () => ds.destroy() };
  }
  const dir = path.join(config.dataDir, "pg");
  const running = runningEmbeddedUrl(dir, "switchyard");
  if (running) {
    const ds = await openDatabase(running, 2);
    return { ds, close: () => ds.destroy() };
  }
  const embedded = await startEmbeddedPostgres({
    dir,
    database: "switchyard",
    onFirstStart: (d) => process.stderr.write(`switchyard admin: initialising embedded PostgreSQL in ${d}\n`),
  });
  try {
    const ds = await openDatabase(embedded.url, 2);
    return {
      ds,
      close: async () => {
        await ds.destroy();
        await embedded.stop();
      },
    };
  } catch (err) {
    await embedded.stop();
    throw err;
  }
}

/** Runs one command; @returns the exit status. */
async function runAdminCli(
  args: string[],
  env: NodeJS.ProcessEnv = process.env,
  out: NodeJS.WritableStream = process.stdout,
  err: NodeJS.WritableStream = process.stderr,
): Promise<number> {
  try {
    const input = parseArgs(args);
    const config = loadConfig(env);
    if (input.command === "migrate") {
      // Opening the store applies what is pending (openDatabase), under the migrations' lock.
      const store = await openStore(config);
      try {
        const [row] = (await store.ds.query("SELECT count(*)::int AS n FROM migrations")) as Array<{ n: number }>;
        out.write(`database migrated: ${row.n} migrations applied in all\n`);
        return 0;
      } finally {
        await store.close();
      }
    }
    const given = input.password ?? env.SWITCHYARD_ADMIN_PASSWORD;
    const password = given ?? randomBytes(18).toString("base64url");
    const store = await openStore(config);
    try {
      const accounts = new AccountService(
        store.ds,
        new TokenService(config.jwtSecret, config.accessTokenTtlS),
        config.signupCreditMicros,
      );
      const { user, created } = await accounts.createOwner({ email: input.email, password, name: input.name });
      if (!created) {
        out.write(`${user.email} already has an account (${user.role} of team ${user.teamId}); nothing changed\n`);
        return 0;
      }
      out.write(`created owner ${user.email} (team ${user.teamId})\n`);
      out.write(given === undefined ? `password: ${password}\n` : "password: the one given\n");
      return 0;
    } finally {
      await store.close();
    }
  } catch (e) {
    if (e instanceof UsageError) {
      err.write(`switchyard admin: ${e.message}\n${USAGE}\n`);
      return 2;
    }
    if (e instanceof AppError) {
      const issues = Array.isArray(e.extra)
        ? (e.extra as Array<{ field?: string; message?: string }>).map((i) => `${i.field}: ${i.message}`).join("; ")
        : "";
      err.write(`switchyard admin: ${e.detail}${issues ? ` (${issues})` : ""}\n`);
      return 1;
    }
    if (e instanceof ConfigError || e instanceof EmbeddedPostgresError) {
      err.write(`switchyard admin: ${e.message}\n`);
      return 1;
    }
    throw e;
  }
}

runAdminCli(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (e: unknown) => {
    process.stderr.write(`switchyard admin: ${e instanceof Error ? e.stack : String(e)}\n`);
    process.exit(1);
  },
);
