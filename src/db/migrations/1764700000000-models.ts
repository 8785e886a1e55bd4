/**
 * Custom models and dedicated deployments (issue 9; DESIGN §3 "Models and deployments"): each
 * belongs to a team. The reconciler (`services/models/deployment-reconciler.ts`) claims due rows
 * with `FOR UPDATE SKIP LOCKED` and holds them by `lease_expires_at` while it brings the model up,
 * so a row left `deploying` by a dead process is claimed again once its lease runs out. `engine`
 * keeps the engine the reconciler chose for a custom model (a local GGUF or an upstream), so every
 * process routes it alike. The hub token is stored sealed (AES-256-GCM), never in clear.
 */
import type { MigrationInterface, QueryRunner } from "typeorm";

const STATUSES = `('pending_deploy', 'deploying', 'available', 'rejected', 'failed')`;

/** Creates `custom_models` and `deployments` (`down` drops them). */
export class Models1764700000000 implements MigrationInterface {
  name = "Models1764700000000";

  async up(q: QueryRunner): Promise<void> {
    await q.query(`
      CREATE TABLE custom_models (
        id uuid PRIMARY KEY,
        team_id uuid NOT NULL REFERENCES teams (id),
        model_id text NOT NULL CHECK (length(model_id) BETWEEN 1 AND 512),
        architecture text NOT NULL
          CHECK (architecture IN ('qwen', 'llama', 'kimi', 'glm', 'deepseek', 'minimax', 'gemma', 'gpt_oss', 'custom')),
        display_name text,
        modality text NOT NULL DEFAULT 'text_generation' CHECK (modality IN ('text_generation', 'text_embedding')),
        artifact_type text NOT NULL DEFAULT 'full' CHECK (artifact_type IN ('full', 'lora')),
        base_model_id text,
        hf_repo text,
        hf_revision text,
        -- AES-256-GCM: version byte, 12-byte IV, 16-byte tag, ciphertext (services/models/secret-box.ts).
        hf_token_sealed bytea,
        notes text,
        deploy_status text NOT NULL DEFAULT 'pending_deploy' CHECK (deploy_status IN ${STATUSES}),
        status_reason text,
        -- Set by request-deployment: the reconciler acts on requested models only.
        deployment_requested_at timestamptz,
        engine jsonb,
        lease_expires_at timestamptz,
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now(),
        UNIQUE (team_id, model_id)
      )`);
    await q.query(`
      CREATE INDEX custom_models_due ON custom_models (deployment_requested_at)
       WHERE deploy_status IN ('pending_deploy', 'deploying') AND deployment_requested_at IS NOT NULL`);
    await q.query(`CREATE INDEX custom_models_available ON custom_models (team_id) WHERE deploy_status = 'available'`);
    await q.query(`
      CREATE TABLE deployments (
        id uuid PRIMARY KEY,
        team_id uuid NOT NULL REFERENCES teams (id),
        name text NOT NULL,
        model_source text NOT NULL CHECK (model_source IN ('platform', 'custom')),
        model_id text NOT NULL,
        region text NOT NULL DEFAULT 'emea' CHECK (region IN ('emea', 'global')),
        performance text NOT NULL DEFAULT 'standard' CHECK (performance IN ('cost_saving', 'standard', 'turbo')),
        min_replicas integer NOT NULL DEFAULT 0,
        max_replicas integer NOT NULL DEFAULT 1,
        notes text,
        status text NOT NULL DEFAULT 'pending_deploy' CHECK (status IN ${STATUSES}),
        status_reason text,
        engine jsonb,
        lease_expires_at timestamptz,
        activated_at timestamptz,
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now(),
        CHECK (0 <= min_replicas AND min_replicas <= max_replicas AND max_replicas <= 1000)
      )`);
    await q.query(`CREATE INDEX deployments_team ON deployments (team_id, created_at)`);
    await q.query(
      `CREATE INDEX deployments_due ON deployments (created_at) WHERE status IN ('pending_deploy', 'deploying')`,
    );
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP TABLE deployments`);
    await q.query(`DROP TABLE custom_models`);
  }
}
