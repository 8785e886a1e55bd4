/**
 * The activity list's `total` at scale (issue 12, item 4): `activity_counts` holds, per team,
 * user, API key, model, type and status, how many activity rows there are — every row, whatever
 * its status (rows in flight included, unlike `usage_daily`, which counts ended requests only).
 * Statement-level triggers keep it in the same transaction as every insert (the group commit, the
 * early in-flight rows), every update that changes one of those columns (an in-flight row ending)
 * and every delete (a refused request's early row). A team has at most a few thousand such
 * groups, so any `total` without a date filter is a sum over them instead of a `count(*)` over up
 * to millions of rows (measured on 8.5 M rows of one team: see bench/NOTES.md).
 *
 * The flush pays one more `INSERT … ON CONFLICT` of a few rows per statement (see NOTES.md).
 */
import type { MigrationInterface, QueryRunner } from "typeorm";
import { NO_USER } from "./1764770000000-usage-daily.js";

const KEY = "team_id, user_id, api_key_id, model, type, status";

/** Adds signed counts of `rows` (a query with the key columns, nullable ids, and a `sign` column). */
const addCounts = (rows: string) => `
  INSERT INTO activity_counts AS c (${KEY}, n)
  SELECT team_id, COALESCE(user_id, '${NO_USER}'), COALESCE(api_key_id, '${NO_USER}'), model, type, status, sum(sign)
    FROM (${rows}) r
   GROUP BY 1, 2, 3, 4, 5, 6
   -- One order for every statement's row locks: concurrent writers cannot deadlock here.
   ORDER BY 1, 2, 3, 4, 5, 6
  ON CONFLICT (${KEY}) DO UPDATE SET n = c.n + EXCLUDED.n`;

/** Creates `activity_counts`, its three triggers on `activity`, and counts the existing rows. */
export class ActivityCounts1764880000000 implements MigrationInterface {
  name = "ActivityCounts1764880000000";

  async up(q: QueryRunner): Promise<void> {
    await q.query(`
      CREATE TABLE activity_counts (
        team_id uuid NOT NULL,
        user_id uuid NOT NULL,
        api_key_id uuid NOT NULL,
        model text NOT NULL,
        type text NOT NULL,
        status text NOT NULL,
        n bigint NOT NULL,
        PRIMARY KEY (${KEY})
      )`);
    await q.query(`
      CREATE FUNCTION activity_counts_add() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        ${addCounts(`SELECT ${KEY}, 1 AS sign FROM new_activity`)};
        RETURN NULL;
      END $$`);
    // Only rows whose counted columns changed: the group commit ending an in-flight row (status),
    // not the retention job clearing bodies.
    await q.query(`
      CREATE FUNCTION activity_counts_change() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        ${addCounts(`
          WITH changed AS (
            SELECT n.id FROM new_activity n JOIN old_activity o ON o.id = n.id
             WHERE (n.team_id, n.user_id, n.api_key_id, n.model, n.type, n.status)
                   IS DISTINCT FROM (o.team_id, o.user_id, o.api_key_id, o.model, o.type, o.status)
          )
          SELECT ${KEY}, 1 AS sign FROM new_activity WHERE id IN (SELECT id FROM changed)
          UNION ALL
          SELECT ${KEY}, -1 AS sign FROM old_activity WHERE id IN (SELECT id FROM changed)`)};
        RETURN NULL;
      END $$`);
    await q.query(`
      CREATE FUNCTION activity_counts_remove() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        ${addCounts(`SELECT ${KEY}, -1 AS sign FROM old_activity`)};
        RETURN NULL;
      END $$`);
    await q.query(`
      CREATE TRIGGER activity_counts_insert AFTER INSERT ON activity
        REFERENCING NEW TABLE AS new_activity FOR EACH STATEMENT EXECUTE FUNCTION activity_counts_add()`);
    await q.query(`
      CREATE TRIGGER activity_counts_update AFTER UPDATE ON activity
        REFERENCING OLD TABLE AS old_activity NEW TABLE AS new_activity
        FOR EACH STATEMENT EXECUTE FUNCTION activity_counts_change()`);
    await q.query(`
      CREATE TRIGGER activity_counts_delete AFTER DELETE ON activity
        REFERENCING OLD TABLE AS old_activity FOR EACH STATEMENT EXECUTE FUNCTION activity_counts_remove()`);
    await q.query(addCounts(`SELECT ${KEY}, 1 AS sign FROM activity`));
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP TRIGGER activity_counts_delete ON activity`);
    await q.query(`DROP TRIGGER activity_counts_update ON activity`);
    await q.query(`DROP TRIGGER activity_counts_insert ON activity`);
    await q.query(`DROP FUNCTION activity_counts_remove()`);
    await q.query(`DROP FUNCTION activity_counts_change()`);
    await q.query(`DROP FUNCTION activity_counts_add()`);
    await q.query(`DROP TABLE activity_counts`);
  }
}
