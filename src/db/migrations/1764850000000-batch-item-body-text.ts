/**
 * Batch item bodies kept as sent (issue 11 review 11b, finding H1): `batch_items.body_json`
 * becomes `json`, which stores the JSON text verbatim, instead of `jsonb`, which reorders object
 * keys (shorter keys first) and cannot hold `\u0000`. An item runs from this stored copy, so under
 * `jsonb` a decision's `state` object and a choice question's labels reached the prompt in another
 * order than over REST, and NUL characters became U+FFFD. Rows already stored keep their (jsonb)
 * text; nothing reads the column by key, so no index or operator depends on `jsonb`.
 */
import type { MigrationInterface, QueryRunner } from "typeorm";

export class BatchItemBodyText1764850000000 implements MigrationInterface {
  name = "BatchItemBodyText1764850000000";

  async up(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE batch_items ALTER COLUMN body_json TYPE json USING body_json::json`);
  }

  async down(q: QueryRunner): Promise<void> {
    // Refused (and rolled back) while an item's body holds a NUL character or a lone surrogate,
    // which jsonb cannot store: end or delete those batches first.
    await q.query(`ALTER TABLE batch_items ALTER COLUMN body_json TYPE jsonb USING body_json::jsonb`);
  }
}
