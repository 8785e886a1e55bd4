/**
 * Teams, members and invitations (issue 8, items 3 and 4; DESIGN §3 Roles): invitations (only the
 * token's SHA-256 is kept), when a user joined their team, a tombstone for a personal team that
 * was removed when its only user joined another team (its ledger rows stay: the ledger is
 * append-only), and the `team_members` view (active users plus pending invitations) that the
 * control plane reads members from.
 */
import type { MigrationInterface, QueryRunner } from "typeorm";

/** Creates `team_invitations`, `teams.deleted_at`, `users.team_joined_at` and `team_members` (`down` drops them). */
export class Teams1764620000000 implements MigrationInterface {
  name = "Teams1764620000000";

  async up(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE teams ADD COLUMN deleted_at timestamptz`);
    await q.query(`ALTER TABLE users ADD COLUMN team_joined_at timestamptz`);
    await q.query(`UPDATE users SET team_joined_at = created_at`);
    await q.query(
      `ALTER TABLE users ALTER COLUMN team_joined_at SET NOT NULL, ALTER COLUMN team_joined_at SET DEFAULT now()`,
    );
    await q.query(`
      CREATE TABLE team_invitations (
        id uuid PRIMARY KEY,
        team_id uuid NOT NULL REFERENCES teams (id),
        email text NOT NULL,
        role text NOT NULL CHECK (role IN ('owner', 'admin', 'member')),
        -- The member's user id: the registered user's, else the id a signup with the token gets.
        user_id uuid NOT NULL,
        token_hash bytea NOT NULL UNIQUE,
        invited_by uuid REFERENCES users (id),
        created_at timestamptz NOT NULL DEFAULT now(),
        expires_at timestamptz NOT NULL,
        accepted_at timestamptz,
        revoked_at timestamptz
      )`);
    // One open invitation per address and team.
    await q.query(`
      CREATE UNIQUE INDEX team_invitations_open_key ON team_invitations (team_id, lower(email))
       WHERE accepted_at IS NULL AND revoked_at IS NULL`);
    await q.query(`
      CREATE VIEW team_members AS
        SELECT u.team_id, u.id AS user_id, u.email, u.role, u.is_active, u.team_joined_at AS created_at,
               NULL::uuid AS invitation_id
          FROM users u
        UNION ALL
        SELECT i.team_id, COALESCE(r.id, i.user_id), i.email, i.role, false, i.created_at, i.id
          FROM team_invitations i
          LEFT JOIN users r ON lower(r.email) = lower(i.email)
         WHERE i.accepted_at IS NULL AND i.revoked_at IS NULL`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP VIEW team_members`);
    await q.query(`DROP TABLE team_invitations`);
    await q.query(`ALTER TABLE users DROP COLUMN team_joined_at`);
    await q.query(`ALTER TABLE teams DROP COLUMN deleted_at`);
  }
}
