/**
 * The `team_members` view lists only invitations that can still be used (issue 8 review): an
 * expired one can no longer be accepted, so it is no pending member (`is_active: false` means
 * "until it is accepted", DESIGN §3 Roles). Inviting the address again replaces it as before.
 */
import type { MigrationInterface, QueryRunner } from "typeorm";

/** Replaces `team_members` so pending rows are unexpired invitations (`down` restores the old view). */
export class OpenInvitations1764745000000 implements MigrationInterface {
  name = "OpenInvitations1764745000000";

  async up(q: QueryRunner): Promise<void> {
    await q.query(view("AND i.expires_at > now()"));
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(view(""));
  }
}

/** The view of migration 1764620000000 with `extra` added to the invitations' filter. */
function view(extra: string): string {
  return `
    CREATE OR REPLACE VIEW team_members AS
      SELECT u.team_id, u.id AS user_id, u.email, u.role, u.is_active, u.team_joined_at AS created_at,
             NULL::uuid AS invitation_id
        FROM users u
      UNION ALL
      SELECT i.team_id, COALESCE(r.id, i.user_id), i.email, i.role, false, i.created_at, i.id
        FROM team_invitations i
        LEFT JOIN users r ON lower(r.email) = lower(i.email)
       WHERE i.accepted_at IS NULL AND i.revoked_at IS NULL ${extra}`;
}
