/**
 * Deployment requests for platform catalog models (issue 27, item 9): `POST
 * /control/v1/models/request-deployment` naming a platform model the service does not serve yet
 * (`coming_soon`, or its file not downloaded) records which team asked and when, once per team
 * and model (the latest ask wins), so an operator can see demand. Custom models keep theirs on
 * `custom_models.deployment_requested_at`.
 */
import type { MigrationInterface, QueryRunner } from "typeorm";

/** Creates `platform_model_requests`. */
export class PlatformModelRequests1764883000000 implements MigrationInterface {
  name = "PlatformModelRequests1764883000000";

  async up(q: QueryRunner): Promise<void> {
    await q.query(
      `CREATE TABLE platform_model_requests (
         team_id uuid NOT NULL REFERENCES teams(id) ON DELETE CASCADE,
         model_id text NOT NULL,
         reason text NOT NULL,
         requested_at timestamptz NOT NULL DEFAULT now(),
         PRIMARY KEY (team_id, model_id)
       )`,
    );
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP TABLE platform_model_requests`);
  }
}
