/**
 * Pricing history (issue 10, item 3): every price a model has had, each in force from its
 * `effective_from` until the next version of the same model. Prices are micro-USD per million
 * tokens (DESIGN §3 Money), as `TokenPrices` holds them. Versions are only ever added (at start-up,
 * when the catalog's price differs from the latest stored one; see `PriceBook`), never changed.
 */
import type { MigrationInterface, QueryRunner } from "typeorm";

/** Creates `model_prices`. */
export class ModelPrices1764750000000 implements MigrationInterface {
  name = "ModelPrices1764750000000";

  async up(q: QueryRunner): Promise<void> {
    await q.query(`
      CREATE TABLE model_prices (
        model_id text NOT NULL,
        effective_from timestamptz NOT NULL,
        input_per_million_micros bigint NOT NULL CHECK (input_per_million_micros >= 0),
        cached_input_per_million_micros bigint NOT NULL CHECK (cached_input_per_million_micros >= 0),
        output_per_million_micros bigint NOT NULL CHECK (output_per_million_micros >= 0),
        created_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (model_id, effective_from)
      )`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query("DROP TABLE model_prices");
  }
}
