/** A user account; belongs to exactly one team with a role. */
import { Column, Entity, PrimaryColumn } from "typeorm";

export type TeamRole = "owner" | "admin" | "member";

/** Every role, most powerful first (DESIGN §3 Roles). */
export const TEAM_ROLES = ["owner", "admin", "member"] as const satisfies readonly TeamRole[];

@Entity("users")
export class UserEntity {
  @PrimaryColumn("uuid") id!: string;
  @Column("text") email!: string;
  @Column("text") name!: string;
  /** argon2id PHC string; null for OAuth-only accounts. */
  @Column({ name: "password_hash", type: "text", nullable: true }) passwordHash!: string | null;
  @Column({ name: "team_id", type: "uuid" }) teamId!: string;
  @Column("text") role!: TeamRole;
  @Column({ name: "is_active", type: "boolean" }) isActive!: boolean;
  /** Access tokens issued before this instant are rejected (password reset). */
  @Column({ name: "tokens_valid_after", type: "timestamptz" }) tokensValidAfter!: Date;
  /** When the user joined their current team (signup, or an accepted invitation). */
  @Column({ name: "team_joined_at", type: "timestamptz" }) teamJoinedAt!: Date;
  @Column({ name: "created_at", type: "timestamptz" }) createdAt!: Date;
  @Column({ name: "updated_at", type: "timestamptz" }) updatedAt!: Date;
}
