/**
 * The metering group commit's one statement (`MeteringService.write`), as data-modifying CTEs:
 * activity rows, stored responses, ledger charges, team balances, API key budgets and use,
 * credit leases, completion events, the webhook outbox and the activity roll-ups, atomic.
 *
 * A lean statement per batch shape (issue 30, item 2): the parts only some requests need are in
 * the text only when the batch has such a request — stored and background responses (`responses`),
 * webhooks (`webhooks`) — so the common flush (chat completions, embeddings, messages) neither
 * plans, initialises nor runs them. Each shape is its own prepared statement (at most four per
 * connection and durability). API key budgets stay in every shape: whether a key has a budget is
 * read at commit, from the database. The keys whose `last_used_at` is due are a parameter, not a
 * shape (a shape seen once a second would be planned afresh nearly every time it runs: the first
 * five runs of a prepared statement on a connection are planned for their values).
 *
 * Roll-ups (`usage_daily`, `activity_counts`): the activity rows this statement inserts are rolled
 * up here, set-based (`usage`, `counts`), and the insert trigger of `activity` is told to skip
 * this statement (its `WHEN` compares `switchyard.activity_rollups` with the statement's own start
 * time, which `serial` sets: migration 1764910000000). Rows in flight that a record ends are
 * updated, and the update trigger rolls those up (it alone sees their old values).
 */
import { CACHE_CHANNEL } from "../platform/cache-bus.js";
import { USAGE_CHARGE_CTES } from "../ledger/ledger.js";
import { KEY_BUDGET_CTES, keySpendCtes } from "../ledger/key-budget.service.js";
import { EVENT_TOPIC, EVENTS_POSITION_LOCK } from "../events/completion-events.service.js";
import {
  ENDED,
  ROLLUPS_SETTING,
  countsRollUp,
  usageRollUp,
} from "../../db/migrations/1764910000000-activity-rollups-in-flush.js";

/** What a batch needs beyond the common parts. */
export interface GroupCommitShape {
  /** A record stores a Response, or is a Response (a background one may have its row). */
  responses: boolean;
  /** A record has a webhook outbox row. */
  webhooks: boolean;
  /** `synchronous_commit = off` for this transaction (durability `process`). */
  asyncCommit: boolean;
}

/** The parameters of a shape's statement, in `$n` order. */
export type GroupCommitParam = "activity" | "holder" | "responses" | "webhooks" | "keys";

/** A shape's statement: its text and which values its `$1`, `$2`, … take. */
export interface GroupCommitStatement {
  text: string;
  params: GroupCommitParam[];
}

const statements = new Map<string, GroupCommitStatement>();

/** The statement of `shape` (built once per shape). Returns rows `source_id`, `charged`, `balance_after` (text). */
export function groupCommitStatement(shape: GroupCommitShape): GroupCommitStatement {
  const key = `${+shape.responses}${+shape.webhooks}${+shape.asyncCommit}`;
  let statement = statements.get(key);
  if (!statement) {
    statement = build(shape);
    statements.set(key, statement);
  }
  return statement;
}

function build(shape: GroupCommitShape): GroupCommitStatement {
  const params: GroupCommitParam[] = [];
  const $ = (param: GroupCommitParam) => {
    params.push(param);
    return `$${params.length}`;
  };
  const activity = $("activity");
  const holder = $("holder");
  const keys = $("keys");
  const r = shape.responses;
  const ctes: string[] = [];
  // Completion events feed (issue 6, item 6): flushes take their feed positions in commit order.
  // This transaction-level lock is taken before anything else of the flush (every CTE that locks a
  // row reads `input` or waits on this one-time filter) and held until commit; see
  // services/events/completion-events.service.ts. Also set here: the roll-up tag (module header)
  // and, in the `process` durability, `synchronous_commit` off for this transaction only.
  ctes.push(`serial AS (
  SELECT pg_advisory_xact_lock(${EVENTS_POSITION_LOCK}),
         set_config('${ROLLUPS_SETTING}', statement_timestamp()::text, true)${
           shape.asyncCommit ? `,\n         set_config('synchronous_commit', 'off', true)` : ""
         }
)`);
  // One row per request id, sorted by id (the writer dedups and sorts): activity rows are
  // inserted in id order, as the early rows of requests in flight are.
  ctes.push(`input AS (
  SELECT * FROM jsonb_to_recordset(${activity}::jsonb) AS x(
    id uuid, ledger_id uuid, team_id uuid, user_id uuid, api_key_id uuid, api_key_name text,
    api_key_prefix text, type text, status text, endpoint text, model text, custom_id text, stream_id uuid,
    batch_id uuid, prompt_tokens integer, completion_tokens integer, total_tokens integer, cached_prompt_tokens integer,
    cost_micros bigint, body_json jsonb, result_json jsonb, error_json jsonb, engine_ms integer,
    created_at timestamptz, completed_at timestamptz, completion_id uuid, service_tier text)
   WHERE EXISTS (SELECT FROM serial)
)`);
  // Zero data retention (issue 8, item 3): teams of this flush that keep no request or result
  // bodies, as the flag stands at commit. Their activity rows get no body_json or result_json,
  // their responses are not stored, and a background response (kept while it runs) is deleted by
  // its terminal record; tokens, cost and the charge are recorded alike.
  ctes.push(`zdr AS (
  SELECT id FROM teams WHERE id IN (SELECT team_id FROM input) AND zero_data_retention_enabled
)`);
  if (r) {
    const responses = $("responses");
    ctes.push(`given AS (
  SELECT * FROM jsonb_to_recordset(${responses}::jsonb) AS r(
    id uuid, team_id uuid, user_id uuid, api_key_id uuid, model text, status text, background boolean,
    stream_id uuid, metadata jsonb, request_json jsonb, response_json jsonb, created_at timestamptz,
    completed_at timestamptz)
)`);
    // Background responses of this flush, locked (a locking read sees the latest row, and a cancel
    // or deadline cannot end one until this commits). One that a cancel or deadline already ended
    // keeps that end: its record takes the stored status and object, so the activity row, the
    // event and the webhook say what GET /v1/responses/{id} says; the tokens it generated are
    // still charged (issue 6, item 2).
    ctes.push(`bg AS (
  SELECT id, status, response_json FROM responses
   WHERE id IN (SELECT id FROM input) AND background
     FOR NO KEY UPDATE
)`);
    // A cancelled one keeps what its generation produced before the abort (output so far, usage):
    // the record's object, with the cancel's status.
    ctes.push(`ended AS (
  SELECT b.id, b.status,
         CASE WHEN b.status = 'cancelled' AND g.id IS NOT NULL
              THEN g.response_json || '{"status": "cancelled", "incomplete_details": null, "error": null}'::jsonb
              ELSE b.response_json END AS response_json
    FROM bg b LEFT JOIN given g ON g.id = b.id
   WHERE b.status <> 'in_progress'
)`);
  }
  // A row in flight (`pending`/`running`, services/metering/in-flight-activity.ts) takes its
  // terminal record; an ended row never changes, so a request is recorded and charged once per id.
  // `inserted`: a new row (not one in flight), which `usage` and `counts` roll up.
  ctes.push(`ins AS (
  INSERT INTO activity (id, team_id, user_id, api_key_id, api_key_name, api_key_prefix, type, status, endpoint,
                        model, custom_id, stream_id, batch_id, prompt_tokens, completion_tokens, total_tokens,
                        cached_prompt_tokens, cost_micros, body_json, result_json, error_json, engine_ms,
                        created_at, completed_at, service_tier)
  SELECT i.id, team_id, user_id, api_key_id, api_key_name, api_key_prefix, type,
         ${r ? `CASE WHEN e.id IS NULL THEN i.status WHEN e.status IN ('cancelled', 'failed') THEN e.status ELSE 'completed' END` : "i.status"},
         endpoint, model, custom_id, stream_id, batch_id, prompt_tokens, completion_tokens, total_tokens,
         cached_prompt_tokens, cost_micros,
         CASE WHEN i.team_id IN (SELECT id FROM zdr) THEN NULL ELSE body_json END,
         CASE WHEN i.team_id IN (SELECT id FROM zdr) THEN NULL
              ${r ? "WHEN e.id IS NULL OR i.result_json IS NULL THEN i.result_json ELSE e.response_json END" : "ELSE i.result_json END"},
         ${r ? "CASE WHEN e.status = 'failed' THEN e.response_json -> 'error' ELSE i.error_json END" : "i.error_json"},
         engine_ms, created_at, completed_at, service_tier
    FROM input i${r ? " LEFT JOIN ended e ON e.id = i.id\n   ORDER BY i.id" : ""}
  ON CONFLICT (id) DO UPDATE SET
    user_id = EXCLUDED.user_id, api_key_id = EXCLUDED.api_key_id, api_key_name = EXCLUDED.api_key_name,
    api_key_prefix = EXCLUDED.api_key_prefix, type = EXCLUDED.type, status = EXCLUDED.status,
    endpoint = EXCLUDED.endpoint, model = EXCLUDED.model, custom_id = EXCLUDED.custom_id,
    stream_id = EXCLUDED.stream_id, batch_id = EXCLUDED.batch_id, prompt_tokens = EXCLUDED.prompt_tokens,
    completion_tokens = EXCLUDED.completion_tokens, total_tokens = EXCLUDED.total_tokens,
    cached_prompt_tokens = EXCLUDED.cached_prompt_tokens, cost_micros = EXCLUDED.cost_micros,
    body_json = EXCLUDED.body_json, result_json = EXCLUDED.result_json, error_json = EXCLUDED.error_json,
    engine_ms = EXCLUDED.engine_ms, completed_at = EXCLUDED.completed_at, service_tier = EXCLUDED.service_tier
  WHERE activity.status IN ('pending', 'running') AND activity.team_id = EXCLUDED.team_id
  RETURNING id, team_id, user_id, api_key_id, type, status, model, endpoint, service_tier, created_at, prompt_tokens,
            completion_tokens, total_tokens, cached_prompt_tokens, cost_micros, (xmax = 0) AS inserted
)`);
  if (r) {
    // A background response's row exists (in_progress) from its create: its terminal record ends
    // it, unless a cancel or the deadline ended it first (issue 6, item 2); a cancel's row takes
    // what the aborted generation produced (`ended`), keeping its completed_at. Never re-created:
    // a background row deleted meanwhile stays deleted.
    ctes.push(`stored AS (
  INSERT INTO responses (id, team_id, user_id, api_key_id, model, status, background, stream_id, metadata,
                         request_json, response_json, created_at, completed_at)
  SELECT g.id, g.team_id, g.user_id, g.api_key_id, g.model, COALESCE(e.status, g.status), g.background,
         g.stream_id, g.metadata, g.request_json, COALESCE(e.response_json, g.response_json), g.created_at,
         g.completed_at
    FROM given g LEFT JOIN ended e ON e.id = g.id
   WHERE g.id IN (SELECT id FROM ins)
     AND (NOT g.background OR g.id IN (SELECT id FROM bg))
     AND g.team_id NOT IN (SELECT id FROM zdr)
  ON CONFLICT (id) DO UPDATE
    SET status = EXCLUDED.status, response_json = EXCLUDED.response_json,
        completed_at = COALESCE(responses.completed_at, EXCLUDED.completed_at), updated_at = now()
  WHERE responses.background AND responses.status IN ('in_progress', 'cancelled')
)`);
    // A zero-data-retention team's background response ends here: readable while it ran, 404 after.
    ctes.push(`forgotten AS (
  DELETE FROM responses
   WHERE id IN (SELECT id FROM bg) AND id IN (SELECT id FROM ins) AND team_id IN (SELECT id FROM zdr)
)`);
  }
  ctes.push(`metered AS (
  SELECT ins.id, ins.team_id, ins.cost_micros, ins.model, ins.endpoint, input.ledger_id, ins.api_key_id
    FROM ins JOIN input USING (id)
   WHERE ins.cost_micros > 0
)`);
  // API key budgets (issue 29, item 1): each cost capped at what its key has left. Then, in
  // ledger id order (the order the entries are inserted in below: their created_at, from
  // clock_timestamp() per row, follows their balance_after, and the transactions list (created_at,
  // id) shows the balance step by step), the running sum per team.
  ctes.push(KEY_BUDGET_CTES);
  ctes.push(`billable AS (
  SELECT key_capped.*, sum(cost_micros) OVER (PARTITION BY team_id ORDER BY ledger_id) AS running
    FROM key_capped
)`);
  ctes.push(USAGE_CHARGE_CTES);
  ctes.push(keySpendCtes(holder));
  ctes.push(`used AS (
  UPDATE api_keys SET last_used_at = now() WHERE id = ANY(${keys}::uuid[]) AND EXISTS (SELECT FROM serial)
)`);
  ctes.push(`leases AS (
  UPDATE credit_leases c SET micros = GREATEST(0, c.micros - s.total), updated_at = now()
    FROM (SELECT team_id, sum(charged) AS total FROM charges GROUP BY team_id) s
   WHERE c.team_id = s.team_id AND c.holder = ${holder}::uuid
)`);
  // One completion event per newly recorded request, positioned under `serial`; listeners learn of
  // new events per team (NOTIFY folds duplicates within a transaction).
  ctes.push(`events AS (
  INSERT INTO completion_events (completion_id, position, team_id, response_id, stream_id, completed_at)
  SELECT input.completion_id, nextval('completion_events_position_seq'), ins.team_id, ins.id, input.stream_id,
         COALESCE(input.completed_at, now())
    FROM ins JOIN input USING (id)
   ORDER BY ins.id
  RETURNING pg_notify('${CACHE_CHANNEL}', '${EVENT_TOPIC}:' || team_id)
)`);
  if (shape.webhooks) {
    // Completion webhooks (issue 6, item 3): the outbox row commits with the terminal status, once
    // per request id; the NOTIFY wakes the dispatchers at commit.
    ctes.push(`webhooks AS (
  INSERT INTO webhook_deliveries (id, team_id, response_id, url, token, body)
  SELECT w.id, w.team_id, w.response_id, w.url, w.token, ${r ? "COALESCE(e.response_json, w.body)" : "w.body"}
    FROM jsonb_to_recordset(${$("webhooks")}::jsonb) AS w(id uuid, team_id uuid, response_id uuid, url text, token text, body jsonb)
    ${r ? "LEFT JOIN ended e ON e.id = w.response_id\n   " : ""}WHERE w.response_id IN (SELECT id FROM ins)
  ON CONFLICT (response_id) DO NOTHING
  RETURNING pg_notify('${CACHE_CHANNEL}', 'webhook:')
)`);
  }
  // The roll-ups of the new rows, as the insert trigger (which skips this statement) would do them:
  // usage counts ended requests, counts every row.
  ctes.push(`usage AS (${usageRollUp(`SELECT *, 1 AS sign FROM ins WHERE inserted AND status IN ${ENDED}`)}\n)`);
  ctes.push(`counts AS (${countsRollUp("SELECT *, 1 AS sign FROM ins WHERE inserted")}\n)`);
  const text = `WITH ${ctes.join(",\n")}\nSELECT source_id, charged, balance_after FROM ledger`;
  return { text, params };
}
