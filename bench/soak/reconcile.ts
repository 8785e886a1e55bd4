/**
 * The soak's reconciliation against its database (issue 28, Checks: "at the end every event,
 * charge and webhook reconciled against the ledger"), one `Reconciliation` per line it prints:
 *   - ledger: the ledger's usage total is the sum of the activity rows' costs (usage is charged per
 *     group-commit flush and team);
 *   - activity: every answered request (sync, streamed, background, batch item) has exactly one
 *     completed activity row;
 *   - events: every activity row has its completion event (the feed's rule: one per finished request);
 *   - each feed listener (events long-polls, the GraphQL subscription) saw every event of its team
 *     from the first one it saw on, once (events are positioned in commit order, so a listener
 *     that is live misses none);
 *   - webhooks, background and chat apart: every request that named a webhook has exactly one
 *     `webhook_deliveries` row, `delivered`, and the receiver got it (webhook-id = the body's id)
 *     with the right bearer token and a terminal status (a background one: its stored status);
 *   - webhook attempts: the attempts recorded equal the requests the receiver got, every
 *     failed-once id was sent again and delivered, nothing arrived twice after a 2xx, no delivery
 *     for a request that named no webhook;
 *   - nothing unfinished (background responses and batches terminal, webhook deliveries ended).
 */
import type pg from "pg";
import type { Receiver } from "./receiver.js";

/** One reconciliation: its name, whether it holds, and its counts in words. */
export interface Reconciliation {
  name: string;
  ok: boolean;
  detail: string;
}

/** A request that named `metadata.completion_webhook`. */
export interface AskedWebhook {
  /** The request (activity) id: `webhook_deliveries.response_id`. */
  requestId: string;
  /** The id its webhook carries (`webhook-id`): the Response id, or `chatcmpl-<request id>`. */
  webhookId: string;
  background: boolean;
}

/** A completion-events listener: the response ids it received, in arrival order. */
export interface FeedListener {
  label: string;
  seen: string[];
}

/** What the soak counted as answered (the activity reconciliation's right-hand side). */
export interface Answered {
  /** Sync, streamed and webhook chat completions answered 200 (streams: with `[DONE]`). */
  inference: number;
  /** Background responses accepted. */
  background: number;
}

/** The statuses a webhook may carry (spec: a callback fires once a response reaches a terminal status). */
const TERMINAL = new Set(["completed", "incomplete", "failed", "cancelled"]);

async function one(sql: pg.Client, q: string, values: unknown[] = []): Promise<number> {
  return Number((await sql.query<{ n: string }>(q, values)).rows[0].n);
}

/** Background responses and batches not yet terminal, webhook deliveries not yet ended. */
export function pending(sql: pg.Client): Promise<number> {
  return one(
    sql,
    "SELECT (SELECT count(*) FROM responses WHERE status IN ('queued','in_progress')) + " +
      "(SELECT count(*) FROM batches WHERE status IN ('pending','running')) + " +
      "(SELECT count(*) FROM webhook_deliveries WHERE status = 'pending') AS n",
  );
}

/** The events `listener` should have seen: its team's, from the first one it saw on. */
async function expectedEvents(sql: pg.Client, listener: FeedListener): Promise<Set<string>> {
  if (listener.seen.length === 0) return new Set();
  const rows = await sql.query<{ id: string }>(
    `SELECT e.response_id::text AS id FROM completion_events e, completion_events f
      WHERE f.response_id = $1 AND e.team_id = f.team_id AND e.position >= f.position`,
    [listener.seen[0]],
  );
  return new Set(rows.rows.map((r) => r.id));
}

/** Events the listeners have yet to see (while settling). */
export async function feedBehind(sql: pg.Client, listeners: FeedListener[]): Promise<number> {
  let behind = 0;
  for (const l of listeners) {
    const seen = new Set(l.seen);
    for (const id of await expectedEvents(sql, l)) if (!seen.has(id)) behind++;
  }
  return behind;
}

/** Asked webhooks the receiver has not yet answered 2xx (while settling). */
export function webhooksBehind(asked: AskedWebhook[], receiver: Receiver): number {
  return asked.filter((w) => !receiver.delivered(w.webhookId)).length;
}

function count<T>(xs: T[], keep: (x: T) => boolean): number {
  return xs.filter(keep).length;
}

/** Every reconciliation, in the order printed. */
export async function reconcile(
  sql: pg.Client,
  answered: Answered,
  asked: AskedWebhook[],
  receiver: Receiver,
  listeners: FeedListener[],
): Promise<Reconciliation[]> {
  const out: Reconciliation[] = [];
  const charged = await one(
    sql,
    "SELECT coalesce(-sum(amount_micros), 0) AS n FROM credit_ledger WHERE type = 'usage'",
  );
  const costs = await one(sql, "SELECT coalesce(sum(cost_micros), 0) AS n FROM activity");
  // Every request is priced (the soak's catalog): a completed row charged nothing is a lost charge.
  const unpriced = await one(sql, "SELECT count(*) AS n FROM activity WHERE status = 'completed' AND cost_micros <= 0");
  out.push({
    name: "ledger",
    ok: charged === costs && unpriced === 0,
    detail: `usage ${charged} µUSD = activity costs ${costs} µUSD; ${unpriced} completed rows charged nothing`,
  });

  const completed = await one(sql, "SELECT count(*) AS n FROM activity WHERE status = 'completed'");
  const activityRows = await one(sql, "SELECT count(*) AS n FROM activity");
  const batchItems = await one(sql, "SELECT count(*) AS n FROM batch_items WHERE status = 'completed'");
  const expected = answered.inference + answered.background + batchItems;
  out.push({
    name: "activity",
    ok: completed === expected,
    detail:
      `completed rows ${completed} = answered ${answered.inference} + background ${answered.background} + ` +
      `batch items ${batchItems} (${expected}); ${activityRows} rows in all`,
  });

  const events = await one(sql, "SELECT count(*) AS n FROM completion_events");
  const eventless = await one(
    sql,
    "SELECT count(*) AS n FROM activity a WHERE NOT EXISTS (SELECT 1 FROM completion_events e WHERE e.response_id = a.id)",
  );
  out.push({
    name: "events",
    ok: eventless === 0 && events === activityRows,
    detail: `${events} completion events for ${activityRows} activity rows; ${eventless} rows without one`,
  });

  for (const l of listeners) {
    const want = await expectedEvents(sql, l);
    const seen = new Set(l.seen);
    const missing = count([...want], (id) => !seen.has(id));
    const stray = count([...seen], (id) => !want.has(id));
    const twice = l.seen.length - seen.size;
    out.push({
      name: l.label,
      ok: want.size > 0 && missing === 0 && twice === 0 && stray === 0,
      detail:
        `saw ${seen.size - stray} of the ${want.size} team events from its first on; ` +
        `${missing} missing, ${twice} twice, ${stray} not in the feed`,
    });
  }

  const rows = (
    await sql.query<{ id: string; status: string; tries: number; stored: string | null }>(
      `SELECT d.response_id::text AS id, d.status, r.status AS stored,
              (SELECT count(*) FROM webhook_attempts a WHERE a.delivery_id = d.id)::int AS tries
         FROM webhook_deliveries d LEFT JOIN responses r ON r.id = d.response_id`,
    )
  ).rows;
  const byId = new Map(rows.map((r) => [r.id, r]));
  for (const background of [true, false]) {
    const mine = asked.filter((w) => w.background === background);
    const row = (w: AskedWebhook) => byId.get(w.requestId);
    const noRow = count(mine, (w) => !row(w));
    const notDelivered = count(mine, (w) => row(w) !== undefined && row(w)!.status !== "delivered");
    const got = mine.map((w) => receiver.delivered(w.webhookId));
    const notReceived = count(got, (a) => !a);
    const notTerminal = count(got, (a) => a !== undefined && !TERMINAL.has(a.status ?? ""));
    const unauthorized = count(mine, (w) => (receiver.attempts.get(w.webhookId) ?? []).some((a) => !a.authorized));
    // A background response's webhook carries its stored Response: the same status.
    const unlike = background
      ? mine.filter((w, i) => got[i] !== undefined && got[i]!.status !== row(w)?.stored).length
      : 0;
    const statuses = new Map<string, number>();
    for (const a of got) if (a) statuses.set(a.status ?? "none", (statuses.get(a.status ?? "none") ?? 0) + 1);
    out.push({
      name: background ? "webhooks (background)" : "webhooks (chat)",
      ok: mine.length > 0 && noRow + notDelivered + notReceived + notTerminal + unauthorized + unlike === 0,
      detail:
        `${mine.length} asked; ${mine.length - noRow - notDelivered} delivered rows (${noRow} missing, ` +
        `${notDelivered} not delivered); received ${mine.length - notReceived} ` +
        `(${[...statuses].map(([s, n]) => `${s} ${n}`).join(", ") || "none"}; ${notTerminal} not terminal` +
        `${background ? `, ${unlike} unlike the stored status` : ""}); ${unauthorized} without the token`,
    });
  }

  const askedIds = new Set(asked.map((w) => w.requestId));
  const askedHooks = new Set(asked.map((w) => w.webhookId));
  const tries = rows.reduce((n, r) => n + r.tries, 0);
  const strayRows = count(rows, (r) => !askedIds.has(r.id));
  const strayHooks = count([...receiver.attempts.keys()], (id) => !askedHooks.has(id));
  const failed = [...receiver.failedOnce];
  const retried = count(failed, (id) => receiver.delivered(id) !== undefined);
  const duplicates = receiver.duplicates();
  out.push({
    name: "webhook attempts",
    ok: tries === receiver.requests() && retried === failed.length && duplicates === 0 && strayRows + strayHooks === 0,
    detail:
      `${tries} recorded = ${receiver.requests()} received; ${retried}/${failed.length} answered 500 once ` +
      `then delivered; ${duplicates} duplicates after a 2xx; ${strayRows} rows and ${strayHooks} ids not asked for`,
  });

  const unfinished = await pending(sql);
  out.push({
    name: "unfinished",
    ok: unfinished === 0,
    detail: `${unfinished} background responses, batches or webhook deliveries not ended`,
  });
  return out;
}
