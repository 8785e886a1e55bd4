/**
 * Initial schema: teams, users, API keys, the append-only credit ledger, activity records and
 * stored responses. Never edit after it lands; add a new migration instead.
 */
import type { MigrationInterface, QueryRunner } from "typeorm";

/** Creates the initial tables, indexes and the ledger's append-only trigger (`down` drops them). */
export class Initial1763769600000 implements MigrationInterface {
  name = "Initial1763769600000";

  async up(q: QueryRunner): Promise<void> {
    await q.query(`
      CREATE TABLE teams (
        id uuid PRIMARY KEY,
        name text NOT NULL,
        email_domain text,
        zero_data_retention_enabled boolean NOT NULL DEFAULT false,
        credit_balance_micros bigint NOT NULL DEFAULT 0 CHECK (credit_balance_micros >= 0),
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now()
      )`);
    await q.query(`
      CREATE TABLE users (
        id uuid PRIMARY KEY,
        email text NOT NULL,
        name text NOT NULL DEFAULT '',
        password_hash text,
        team_id uuid NOT NULL REFERENCES teams (id),
        role text NOT NULL CHECK (role IN ('owner', 'admin', 'member')),
        is_active boolean NOT NULL DEFAULT true,
        tokens_valid_after timestamptz NOT NULL DEFAULT '-infinity',
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now()
      )`);
    await q.query(`CREATE UNIQUE INDEX users_email_key ON users (lower(email))`);
    await q.query(`CREATE INDEX users_team_idx ON users (team_id)`);
    await q.query(`
      CREATE TABLE api_keys (
        id uuid PRIMARY KEY,
        team_id uuid NOT NULL REFERENCES teams (id),
        user_id uuid NOT NULL REFERENCES users (id),
        name text NOT NULL,
        prefix text NOT NULL,
        key_hash bytea NOT NULL UNIQUE,
        created_at timestamptz NOT NULL DEFAULT now(),
        last_used_at timestamptz,
        expires_at timestamptz,
        revoked_at timestamptz
      )`);
    await q.query(`CREATE INDEX api_keys_team_idx ON api_keys (team_id, created_at DESC)`);
    await q.query(`
      CREATE TABLE credit_ledger (
        id uuid PRIMARY KEY,
        team_id uuid NOT NULL REFERENCES teams (id),
        type text NOT NULL CHECK (type IN ('grant', 'usage', 'topup', 'adjustment', 'refund')),
        amount_micros bigint NOT NULL,
        balance_after_micros bigint NOT NULL CHECK (balance_after_micros >= 0),
        source_id text NOT NULL,
        description text NOT NULL DEFAULT '',
        external_provider text,
        external_payment_id text,
        created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        CONSTRAINT credit_ledger_source_key UNIQUE (type, source_id)
      )`);
    await q.query(`CREATE INDEX credit_ledger_team_idx ON credit_ledger (team_id, created_at DESC, id DESC)`);
    await q.query(`
      CREATE FUNCTION credit_ledger_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        RAISE EXCEPTION 'credit_ledger is append-only';
      END $$`);
    await q.query(`
      CREATE TRIGGER credit_ledger_no_change BEFORE UPDATE OR DELETE ON credit_ledger
      FOR EACH ROW EXECUTE FUNCTION credit_ledger_append_only()`);
    await q.query(`
      CREATE TABLE activity (
        id uuid PRIMARY KEY,
        team_id uuid NOT NULL REFERENCES teams (id),
        user_id uuid,
        api_key_id uuid,
        api_key_name text,
        api_key_prefix text,
        type text NOT NULL CHECK (type IN ('standalone', 'batch', 'stream')),
        status text NOT NULL CHECK (status IN ('pending', 'running', 'completed', 'failed', 'cancelled')),
        endpoint text NOT NULL,
        model text NOT NULL,
        custom_id text,
        batch_id uuid,
        stream_id uuid,
        prompt_tokens integer NOT NULL DEFAULT 0,
        completion_tokens integer NOT NULL DEFAULT 0,
        total_tokens integer NOT NULL DEFAULT 0,
        cached_prompt_tokens integer NOT NULL DEFAULT 0,
        cost_micros bigint NOT NULL DEFAULT 0,
        body_json jsonb,
        result_json jsonb,
        error_json jsonb,
        engine_ms integer,
        created_at timestamptz NOT NULL,
        completed_at timestamptz
      )`);
    await q.query(`CREATE INDEX activity_team_created_idx ON activity (team_id, created_at DESC)`);
    await q.query(`
      CREATE TABLE responses (
        id uuid PRIMARY KEY,
        team_id uuid NOT NULL REFERENCES teams (id),
        user_id uuid,
        api_key_id uuid,
        model text NOT NULL,
        status text NOT NULL,
        background boolean NOT NULL DEFAULT false,
        stream_id uuid,
        metadata jsonb,
        request_json jsonb NOT NULL,
        response_json jsonb NOT NULL,
        created_at timestamptz NOT NULL,
        completed_at timestamptz,
        updated_at timestamptz NOT NULL DEFAULT now()
      )`);
    await q.query(`CREATE INDEX responses_team_idx ON responses (team_id, id DESC)`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP TABLE responses`);
    await q.query(`DROP TABLE activity`);
    await q.query(`DROP TABLE credit_ledger`);
    await q.query(`DROP FUNCTION credit_ledger_append_only()`);
    await q.query(`DROP TABLE api_keys`);
    await q.query(`DROP TABLE users`);
    await q.query(`DROP TABLE teams`);
  }
}
