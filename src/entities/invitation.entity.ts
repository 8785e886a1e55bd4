/**
 * An invitation into a team (DESIGN §3 Roles): made by an owner or admin, mailed and shown once
 * to the inviter as `invite_token`; only the token's SHA-256 is stored. Used once (accept, or
 * signup with the token), revoked by removing the pending member or inviting the address again.
 */
import { Column, Entity, PrimaryColumn } from "typeorm";
import type { TeamRole } from "./user.entity.js";

@Entity("team_invitations")
export class InvitationEntity {
  @PrimaryColumn("uuid") id!: string;
  @Column({ name: "team_id", type: "uuid" }) teamId!: string;
  @Column("text") email!: string;
  @Column("text") role!: TeamRole;
  /** The registered user's id when invited, else the id a signup with the token creates the user with. */
  @Column({ name: "user_id", type: "uuid" }) userId!: string;
  @Column({ name: "token_hash", type: "bytea" }) tokenHash!: Buffer;
  @Column({ name: "invited_by", type: "uuid", nullable: true }) invitedBy!: string | null;
  @Column({ name: "created_at", type: "timestamptz" }) createdAt!: Date;
  @Column({ name: "expires_at", type: "timestamptz" }) expiresAt!: Date;
  @Column({ name: "accepted_at", type: "timestamptz", nullable: true }) acceptedAt!: Date | null;
  @Column({ name: "revoked_at", type: "timestamptz", nullable: true }) revokedAt!: Date | null;
}
