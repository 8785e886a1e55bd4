/**
 * The completion-webhook dispatcher (issue 6, item 3; DESIGN §3 Webhooks). The metering group
 * commit writes one `webhook_deliveries` row per finished request that named a usable webhook, in
 * the same transaction as its terminal status, and NOTIFYs `webhook:` on the cache channel. Every
 * process running a dispatcher claims due rows with `FOR UPDATE SKIP LOCKED` (so any number of
 * them share the work, each row goes to one), sends them (`webhook-client.ts`), records each
 * attempt in `webhook_attempts`, and schedules the next one: the first at once, then one retry per
 * `retryDelaysMs` entry (±20 % jitter; a 429/503 `Retry-After` postpones it, up to the schedule's
 * longest delay). Woken by NOTIFY, by its own retry timers and by a poll (`pollMs`) that also
 * catches other processes' retries and lost leases.
 *
 * Slow receivers (issue 28, item 2): attempts are bounded per team and destination host (the
 * URL's `host[:port]`, `hostConcurrency` at once in this process for each team), per team
 * (`teamBound`) and per process (`concurrency`). A receiver that hangs holds at most its own
 * team's slots for that host for the attempt ceiling; deliveries to other hosts, of its team or
 * any other, and other teams' deliveries to the same host, are claimed as soon as they are due.
 * (The host bound was one per host, for all teams, until the review of session 15: a team could
 * queue deliveries to a hanging path on a host another team also uses, a shared receiver or that
 * team's own ingress, and hold the other team's healthy path there behind all of them.) Claims go round-robin over teams (each team's oldest due deliveries first). The last
 * quarter of the process (`teamBound` slots) goes only to teams with no attempt under way here,
 * one slot each, so teams at their bound with hanging receivers hold at most three quarters.
 *
 * Leases (issue 28, item 3): a claimed row is leased for 10 s and renewed every 3 s while its
 * attempt runs (`webhook-leases.ts`): a process that dies mid-attempt leaves its deliveries due
 * again within 10 s, and two processes never attempt one delivery at once. Every record of an
 * attempt is fenced by the attempt number it claimed.
 * A delivery that has ended keeps its attempts. A delivered one drops its body and token; a failed
 * one of a team without zero data retention keeps its body, and its token sealed (`TokenSealer`),
 * for `keepFailedMs` so that it can be redelivered by hand (issue 27, item 6:
 * `webhook-deliveries.service.ts` resets it to pending, and this dispatcher sends it again the same
 * way, SSRF guard included); the sweep drops them when that time is up. A redelivery's retries
 * count from `attempts_before`, the attempts made before it.
 * `start()`/`stop()` are its whole lifecycle, so it can move under a worker role as it stands.
 */
import { setMaxListeners } from "node:events";
import type { Logger } from "pino";
import type { DataSource } from "typeorm";
import { queryRows } from "../../../db/sql.js";
import type { CacheBus } from "../../platform/cache-bus.js";
import { type AttemptResult, attemptDelivery } from "./webhook-client.js";
import { LEASE_MS, type LeasedAttempt, LeaseKeeper } from "./webhook-leases.js";
import { traceAttempt } from "./webhook-tracing.js";
import { signWebhook } from "./webhook-target.js";
import type { Tracing } from "../../../shared/tracing.js";

/** Settings (README "Configuration": `SWITCHYARD_WEBHOOK_*`). */
export interface WebhookDispatcherOptions {
  allowPrivate: boolean;
  /** Delays before retries 1…n, ms (n retries after the first attempt). */
  retryDelaysMs: number[];
  /** Ceiling of one attempt, ms. */
  timeoutMs: number;
  /** Attempts under way at once in this process (default `DEFAULT_CONCURRENCY`). */
  concurrency?: number;
  /** Attempts under way at once to one destination host in this process (default `DEFAULT_HOST_CONCURRENCY`). */
  hostConcurrency?: number;
  /** Poll interval for work announced nowhere else (default 1000 ms). */
  pollMs?: number;
  /** Told each attempt's outcome: delivered, retry (tried again later) or failed (for good); for metrics. */
  onAttempt?: (outcome: "delivered" | "retry" | "failed") => void;
  /**
   * How long a failed delivery keeps what a manual redelivery needs, ms (default
   * `KEEP_FAILED_MS`; 0 keeps nothing). Without `sealer`, only deliveries without a token are kept.
   */
  keepFailedMs?: number;
  /** Seals a failed delivery's webhook token while it is kept (never stored in plaintext then). */
  sealer?: TokenSealer;
  /** Traces (issue 29, item 2): a span per attempt when on. */
  tracing?: Tracing;
}

/**
 * Seals and opens a failed delivery's webhook token (the composition root hands in a `SecretBox`
 * with the purpose `WEBHOOK_TOKEN_PURPOSE`); `context` is the delivery id, so a sealed token opens
 * only on its own row.
 */
export interface TokenSealer {
  seal(plaintext: string, context: string): Buffer;
  /** @throws Error when the value was altered, sealed for another row or under another key. */
  open(sealed: Buffer, context: string): string;
}

/** The key purpose of sealed webhook tokens (`SecretBox`). */
export const WEBHOOK_TOKEN_PURPOSE = "webhook-token";

/** How long a failed delivery stays redeliverable by default: 7 days, ms. */
export const KEEP_FAILED_MS = 7 * 24 * 3_600_000;

/** How often kept failed deliveries past their time are swept, ms. */
const KEPT_SWEEP_MS = 60_000;

interface ClaimedDelivery {
  id: string;
  response_id: string;
  url: string;
  token: string | null;
  body: unknown;
  attempts: number;
  /** Attempts made before the latest manual redelivery (its retry budget counts from here). */
  attempts_before: number;
  secret: string | null;
  team_id: string;
  /** The team keeps no request or result bodies: nothing of a failed delivery is kept. */
  zdr: boolean;
  /** The destination host (`HOST_SQL`), the key of the per-host bound. */
  host: string;
}

/** Attempts under way at once in one process, by default (`SWITCHYARD_WEBHOOK_CONCURRENCY`). */
export const DEFAULT_CONCURRENCY = 256;

/** Attempts under way at once to one destination host in one process, by default (`SWITCHYARD_WEBHOOK_HOST_CONCURRENCY`). */
export const DEFAULT_HOST_CONCURRENCY = 4;

/**
 * Attempts one team may have under way in one process: a quarter of the process's
 * (`concurrency`), never fewer than one host's (`hostConcurrency`); 64 of 256 by default.
 *
 * Why a team bound at all: fairness between teams. Without it one team whose receivers hang, on
 * enough hosts, could fill every slot of the process for the attempt ceiling and delay every other
 * team's webhooks (the per-host bound alone does not stop that: hosts are free to make up). With
 * it, one team never holds more than a quarter of the process, so other teams always find three
 * quarters of it.
 *
 * Why this large: hanging hosts must not exhaust it. Each hanging host holds at most
 * `hostConcurrency` attempts, so a team fills its bound only with `teamBound / hostConcurrency`
 * hosts hanging at the same time (16 by default); until then its healthy receivers are served as
 * soon as their deliveries are due. (The per-team bound of 4 it replaces let four hanging
 * attempts hold every other delivery of the team for up to the attempt ceiling: issue 28, item 2.)
 */
export function teamBound(concurrency: number, hostConcurrency: number): number {
  return Math.max(hostConcurrency, Math.floor(concurrency / 4));
}

/** The key of a delivery's team and destination host, as the claim's SQL spells it. */
function teamHost(row: { team_id: string; host: string }): string {
  return `${row.team_id} ${row.host}`;
}

/**
 * A delivery's destination host in SQL: `host[:port]` of its URL (stored normalised by
 * `webhookTarget`: lower-case scheme and host, no user info, no default port).
 */
const HOST_SQL = `coalesce(substring(d.url from '^[a-z][a-z0-9+.-]*://([^/?#]*)'), d.url)`;

/** A delay with ±20 % jitter (DESIGN §3 Webhooks), ms. */
export function jittered(delayMs: number, random: () => number = Math.random): number {
  return Math.round(delayMs * (0.8 + 0.4 * random()));
}

/**
 * The delay before the retry that follows failed attempt `attempt` (1-based), ms: the schedule's
 * entry with jitter, postponed by a `Retry-After` (429/503) but never past the schedule's longest
 * delay ("honoured within that schedule").
 */
export function retryDelay(schedule: number[], attempt: number, retryAfterMs: number | null): number {
  const base = jittered(schedule[Math.min(attempt, schedule.length) - 1] ?? 0);
  if (retryAfterMs === null) return base;
  return Math.max(base, Math.min(retryAfterMs, Math.max(...schedule)));
}

/** Claims, sends and records completion-webhook deliveries; one per process. */
export class WebhookDispatcher {
  private readonly inFlight = new Set<Promise<void>>();
  /** Attempts under way in this process, per team (see `teamBound`). */
  private readonly teamInFlight = new Map<string, number>();
  /** Attempts under way in this process, per team and destination host (`teamHost`; `hostConcurrency`). */
  private readonly hostInFlight = new Map<string, number>();
  private readonly timers = new Set<NodeJS.Timeout>();
  private readonly abort = new AbortController();
  private poll?: NodeJS.Timeout;
  /** The leases of the attempts under way here. */
  private readonly leases: LeaseKeeper;
  private pumping = false;
  private again = false;
  /** Set by the poll: the next pump also ends deliveries whose last lease ran out. */
  private sweep = true;
  /** When kept failed deliveries were last swept (`Date.now()`), 0 before the first sweep. */
  private keptSweptAt = 0;
  private running = false;
  private listening = false;

  constructor(
    private readonly ds: DataSource,
    private readonly bus: CacheBus,
    private readonly logger: Logger,
    private readonly opts: WebhookDispatcherOptions,
  ) {
    // Every attempt in flight listens for shutdown on the one signal.
    setMaxListeners(0, this.abort.signal);
    this.leases = new LeaseKeeper(ds, logger);
  }

  private get maxAttempts(): number {
    return this.opts.retryDelaysMs.length + 1;
  }

  private get concurrency(): number {
    return this.opts.concurrency ?? DEFAULT_CONCURRENCY;
  }

  private get hostConcurrency(): number {
    return this.opts.hostConcurrency ?? DEFAULT_HOST_CONCURRENCY;
  }

  /** Starts claiming deliveries (NOTIFY, retry timers and the poll wake it). */
  start(): void {
    if (this.running) return;
    this.running = true;
    if (!this.listening) {
      this.listening = true;
      this.bus.on("webhook", () => this.wake());
      this.bus.on("*", () => this.wake());
    }
    this.poll = setInterval(() => {
      this.sweep = true;
      this.wake();
    }, this.opts.pollMs ?? 1000);
    this.poll.unref();
    this.leases.start();
    this.wake();
  }

  /**
   * Stops claiming and aborts attempts under way; their deliveries are handed back (due at once,
   * the interrupted attempt not counted) for this or another process to send.
   */
  async stop(): Promise<void> {
    this.running = false;
    if (this.poll) clearInterval(this.poll);
    this.leases.stop();
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
    this.abort.abort();
    await Promise.allSettled([...this.inFlight]);
  }

  /** Looks for due deliveries now (coalesced with a look already under way). */
  wake(): void {
    if (!this.running) return;
    if (this.pumping) {
      this.again = true;
      return;
    }
    void this.pump();
  }

  private async pump(): Promise<void> {
    this.pumping = true;
    try {
      do {
        this.again = false;
        if (this.sweep) {
          this.sweep = false;
          await this.expireExhausted();
          if (Date.now() - this.keptSweptAt >= KEPT_SWEEP_MS) {
            this.keptSweptAt = Date.now();
            await this.dropKept();
          }
        }
        const free = this.concurrency - this.inFlight.size;
        if (free <= 0 || !this.running) break;
        // A quarter of the process (the team bound) is kept for teams with no attempt under way
        // here, one slot each: teams at their bound with hanging receivers can hold at most
        // three quarters of it (review of issue 28, item 2: four teams at their bound took it all,
        // and a fifth team's healthy receiver waited for the attempt ceiling).
        const bound = teamBound(this.concurrency, this.hostConcurrency);
        const reserve = Math.max(0, Math.min(bound, this.concurrency - bound));
        const open = Math.min(free, Math.max(0, this.concurrency - reserve - this.inFlight.size));
        let rows = open > 0 ? await this.claim(open, bound) : [];
        this.startAttempts(rows);
        const left = this.concurrency - this.inFlight.size;
        // Only when the first claim was cut by its limit: otherwise it took every due delivery
        // a newcomer could have had.
        if (left > 0 && rows.length === open) {
          const newcomers = await this.claim(left, 1);
          this.startAttempts(newcomers);
          rows = rows.concat(newcomers);
        }
        if (rows.length >= free) this.again = true;
      } while (this.again && this.running);
    } catch (err) {
      this.logger.warn({ err }, "webhook dispatcher could not claim deliveries");
    } finally {
      this.pumping = false;
    }
  }

  /** Starts the attempts of `rows`, just claimed, counting them against their team and host. */
  private startAttempts(rows: ClaimedDelivery[]): void {
    const claimedAt = Date.now();
    for (const row of rows) {
      count(this.teamInFlight, row.team_id, 1);
      count(this.hostInFlight, teamHost(row), 1);
      const lease = this.leases.add(
        { id: row.id, responseId: row.response_id, attempt: row.attempts, host: row.host },
        claimedAt,
      );
      const task: Promise<void> = this.deliver(row, lease)
        .catch((err: unknown) => this.logger.error({ err, deliveryId: row.id }, "webhook delivery step failed"))
        .finally(() => {
          this.inFlight.delete(task);
          this.leases.remove(row.id);
          count(this.teamInFlight, row.team_id, -1);
          count(this.hostInFlight, teamHost(row), -1);
          this.wake();
        });
      this.inFlight.add(task);
    }
  }

  /**
   * Leases up to `n` due deliveries to this process (one more attempt each, leased for
   * `LEASE_MS`): at most `hostConcurrency` per team and destination host and `perTeam` per team, counting
   * the attempts already under way here; the teams' oldest due deliveries first, round-robin.
   */
  private claim(n: number, perTeam: number): Promise<ClaimedDelivery[]> {
    const hosts = [...this.hostInFlight];
    const teams = [...this.teamInFlight];
    return queryRows<ClaimedDelivery>(
      this.ds,
      `WITH due AS (
         SELECT d.id, d.team_id, d.next_attempt_at, ${HOST_SQL} AS host
           FROM webhook_deliveries d
          WHERE d.status = 'pending' AND d.next_attempt_at <= now() AND d.attempts - d.attempts_before < $1
       ),
       per_host AS (
         SELECT due.id, due.team_id, due.next_attempt_at,
                row_number() OVER (PARTITION BY due.team_id, due.host ORDER BY due.next_attempt_at, due.id)
                  + coalesce(h.n, 0) AS nth
           FROM due LEFT JOIN unnest($4::text[], $5::int[]) AS h(team_host, n)
                  ON h.team_host = due.team_id::text || ' ' || due.host
       ),
       per_team AS (
         SELECT p.id,
                row_number() OVER (PARTITION BY p.team_id ORDER BY p.next_attempt_at, p.id) + coalesce(b.n, 0) AS nth
           FROM per_host p LEFT JOIN unnest($6::uuid[], $7::int[]) AS b(team_id, n) ON b.team_id = p.team_id
          WHERE p.nth <= $8
       ),
       picked AS (
         SELECT d.id FROM webhook_deliveries d JOIN per_team f ON f.id = d.id
          WHERE f.nth <= $9 AND d.status = 'pending' AND d.next_attempt_at <= now()
          ORDER BY f.nth, d.next_attempt_at
          LIMIT $2
            FOR UPDATE OF d SKIP LOCKED
       )
       UPDATE webhook_deliveries d
          SET attempts = d.attempts + 1, next_attempt_at = now() + make_interval(secs => $3::double precision / 1000),
              updated_at = now()
         FROM picked, teams t
        WHERE d.id = picked.id AND t.id = d.team_id
       RETURNING d.id, d.response_id, d.url, d.token, d.body, d.attempts, d.attempts_before,
                 t.webhook_signing_secret AS secret, d.team_id, t.zero_data_retention_enabled AS zdr,
                 ${HOST_SQL} AS host`,
      [
        this.maxAttempts,
        n,
        LEASE_MS,
        hosts.map(([host]) => host),
        hosts.map(([, busy]) => busy),
        teams.map(([team]) => team),
        teams.map(([, busy]) => busy),
        this.hostConcurrency,
        perTeam,
      ],
    );
  }

  /**
   * Deliveries whose last attempt's lease ran out with no attempts left (their process died) end
   * failed, kept for a redelivery as `recordAttempt` keeps them (their tokens sealed here, so
   * each is read under a row lock first).
   */
  private async expireExhausted(): Promise<void> {
    // The common case, nothing to end, costs one indexed read and no transaction.
    const due = await queryRows<{ id: string }>(
      this.ds,
      `SELECT id FROM webhook_deliveries
        WHERE status = 'pending' AND attempts - attempts_before >= $1 AND next_attempt_at <= now()
        LIMIT 100`,
      [this.maxAttempts],
    );
    if (due.length === 0) return;
    const ended = await this.ds.transaction(async (m) => {
      const rows = await queryRows<{ id: string; response_id: string; token: string | null; zdr: boolean }>(
        m,
        `SELECT d.id, d.response_id, d.token, t.zero_data_retention_enabled AS zdr
           FROM webhook_deliveries d JOIN teams t ON t.id = d.team_id
          WHERE d.id = ANY($2::uuid[]) AND d.status = 'pending' AND d.attempts - d.attempts_before >= $1
            AND d.next_attempt_at <= now()
            FOR UPDATE OF d SKIP LOCKED`,
        [this.maxAttempts, due.map((r) => r.id)],
      );
      for (const r of rows) {
        const kept = this.keeping(r);
        await m.query(
          `UPDATE webhook_deliveries
              SET status = 'failed', finished_at = now(), updated_at = now(), token = NULL,
                  last_error = coalesce(last_error, 'attempt interrupted'),
                  body = CASE WHEN $2::double precision IS NULL THEN 'null'::jsonb ELSE body END,
                  token_sealed = $3, kept_until = now() + make_interval(secs => $2::double precision / 1000)
            WHERE id = $1`,
          [r.id, kept.keepMs, kept.sealed],
        );
      }
      return rows;
    });
    for (const r of ended) {
      this.logger.warn({ deliveryId: r.id, responseId: r.response_id }, "webhook delivery failed: attempts exhausted");
    }
  }

  /**
   * What a delivery that fails now keeps for a manual redelivery: `keepMs` (null: nothing, its
   * body is dropped as a delivered one's) and its token sealed (null when it has none). A team
   * with zero data retention keeps nothing, nor does a delivery with a token and no sealer here.
   */
  private keeping(row: { id: string; token: string | null; zdr: boolean }): {
    keepMs: number | null;
    sealed: Buffer | null;
  } {
    const keepMs = this.opts.keepFailedMs ?? KEEP_FAILED_MS;
    if (row.zdr || keepMs <= 0 || (row.token !== null && !this.opts.sealer)) return { keepMs: null, sealed: null };
    return { keepMs, sealed: row.token === null ? null : this.opts.sealer!.seal(row.token, row.id) };
  }

  /** Kept failed deliveries past their time drop their body and sealed token: no longer redeliverable. */
  private async dropKept(): Promise<void> {
    await this.ds.query(
      `UPDATE webhook_deliveries SET body = 'null'::jsonb, token_sealed = NULL, kept_until = NULL, updated_at = now()
        WHERE kept_until IS NOT NULL AND kept_until <= now()`,
    );
  }

  private async deliver(row: ClaimedDelivery, lease: LeasedAttempt): Promise<void> {
    const controller = lease.controller;
    const body = JSON.stringify(row.body);
    const bodyId = (row.body as { id?: unknown } | null)?.id;
    const webhookId = typeof bodyId === "string" ? bodyId : row.response_id;
    const timestamp = Math.floor(Date.now() / 1000);
    const headers: Record<string, string> = {
      "content-type": "application/json",
      "user-agent": "Switchyard-Webhooks/1",
      "webhook-id": webhookId,
      "webhook-timestamp": String(timestamp),
    };
    if (row.token) headers.authorization = `Bearer ${row.token}`;
    if (row.secret) headers["webhook-signature"] = signWebhook(row.secret, webhookId, timestamp, body);
    // Shutdown aborts every attempt; a lost lease aborts this one.
    const onStop = () => controller.abort();
    this.abort.signal.addEventListener("abort", onStop, { once: true });
    if (this.abort.signal.aborted) controller.abort();
    let result: AttemptResult;
    try {
      result = await traceAttempt(this.opts.tracing, row, () =>
        attemptDelivery({
          url: row.url,
          headers,
          body,
          timeoutMs: this.opts.timeoutMs,
          allowPrivate: this.opts.allowPrivate,
          signal: controller.signal,
        }),
      );
    } finally {
      this.abort.signal.removeEventListener("abort", onStop);
    }
    if (lease.leaseLost && !result.ok) {
      // Recorded as any failed attempt (fenced: a no-op once another process took the row over).
      result = { ...result, error: "aborted: the lease was lost" };
    } else if (this.abort.signal.aborted && !result.ok) {
      // Shutting down: hand the delivery back without counting the interrupted attempt.
      await this.leases.recording(lease);
      await this.ds
        .query(
          `UPDATE webhook_deliveries SET attempts = attempts - 1, next_attempt_at = now(), updated_at = now()
            WHERE id = $1 AND attempts = $2 AND status = 'pending'`,
          [row.id, row.attempts],
        )
        .catch(() => undefined);
      return;
    }
    await this.recordAttempt(row, lease, result);
  }

  /**
   * Records the attempt and moves the delivery on (delivered, failed, or due again later), only
   * while the row is still at the attempt this process claimed (no lease renewal overlaps it:
   * `LeaseKeeper.recording`).
   */
  private async recordAttempt(row: ClaimedDelivery, lease: LeasedAttempt, result: AttemptResult): Promise<void> {
    await this.leases.recording(lease);
    // The attempt's place in its round: the first sending, or the latest manual redelivery.
    const nth = row.attempts - row.attempts_before;
    const last = result.ok || result.refused || nth >= this.maxAttempts;
    const status = result.ok ? "delivered" : last ? "failed" : "pending";
    this.opts.onAttempt?.(status === "pending" ? "retry" : status);
    const delayMs = last ? 0 : retryDelay(this.opts.retryDelaysMs, nth, result.retryAfterMs);
    const kept = status === "failed" ? this.keeping(row) : { keepMs: null, sealed: null };
    await this.ds.query(
      `WITH attempt AS (
         INSERT INTO webhook_attempts (delivery_id, attempt, status_code, latency_ms, error)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT DO NOTHING
       )
       UPDATE webhook_deliveries
          SET status = $6, last_error = $5, updated_at = now(),
              -- An ended delivery keeps no copy of the response, nor the token in plaintext (the
              -- attempts stay); a failed one may keep both for a redelivery (see keeping), the token sealed.
              body = CASE WHEN $6 = 'pending' OR $8::double precision IS NOT NULL THEN body ELSE 'null'::jsonb END,
              token = CASE WHEN $6 = 'pending' THEN token END,
              token_sealed = $9,
              kept_until = now() + make_interval(secs => $8::double precision / 1000),
              next_attempt_at = now() + make_interval(secs => $7::double precision / 1000),
              finished_at = CASE WHEN $6 = 'pending' THEN NULL ELSE now() END
        WHERE id = $1 AND attempts = $2 AND status = 'pending'`,
      [
        row.id,
        row.attempts,
        result.statusCode,
        result.latencyMs,
        result.error,
        status,
        delayMs,
        kept.keepMs,
        kept.sealed,
      ],
    );
    if (status === "pending") {
      const timer = setTimeout(() => {
        this.timers.delete(timer);
        this.wake();
      }, delayMs + 5);
      timer.unref();
      this.timers.add(timer);
    } else if (status === "failed") {
      // Best effort (spec rule 6): logged, the response is unaffected. Never the token or the URL's
      // path and query (they may carry secrets): the host only.
      this.logger.warn(
        {
          deliveryId: row.id,
          responseId: row.response_id,
          host: safeHost(row.url),
          attempts: row.attempts,
          error: result.error,
        },
        "webhook delivery failed",
      );
    }
  }
}

/** Adds `by` to `key`'s count in `counts`, dropping counts that reach 0. */
function count(counts: Map<string, number>, key: string, by: number): void {
  const n = (counts.get(key) ?? 0) + by;
  if (n > 0) counts.set(key, n);
  else counts.delete(key);
}

function safeHost(url: string): string | null {
  try {
    return new URL(url).host;
  } catch {
    return null;
  }
}
