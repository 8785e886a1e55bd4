/**
 * A user account; belongs to exactly one team with a role. Also the GraphQL `User` type
 * (UserResponse; its REST shape is `userJson` in rest/control.presenters.ts): only the decorated
 * fields are exposed — never the password hash or token bookkeeping.
 */
import { Field, ObjectType } from "type-graphql";
import { Column, Entity, PrimaryColumn } from "typeorm";

export type TeamRole = "owner" | "admin" | "member";

/** Every role, most powerful first (DESIGN §3 Roles). */
export const TEAM_ROLES = ["owner", "admin", "member"] as const satisfies readonly TeamRole[];

@ObjectType("User", { description: "A user (UserResponse)." })
@Entity("users")
export class UserEntity {
  @Field() @PrimaryColumn("uuid") id!: string;
  @Field() @Column("text") email!: string;
  @Field() @Column("text") name!: string;
  /** argon2id PHC string; null for OAuth-only accounts. */
  @Column({ name: "password_hash", type: "text", nullable: true }) passwordHash!: string | null;
  @Field() @Column({ name: "team_id", type: "uuid" }) teamId!: string;
  @Field(() => String, { description: "Team role: owner, admin or member." }) @Column("text") role!: TeamRole;
  @Column({ name: "is_active", type: "boolean" }) isActive!: boolean;
  /** Access tokens issued before this instant are rejected (password reset). */
  @Column({ name: "tokens_valid_after", type: "timestamptz" }) tokensValidAfter!: Date;
  /** When the user joined their current team (signup, or an accepted invitation). */
  @Column({ name: "team_joined_at", type: "timestamptz" }) teamJoinedAt!: Date;
  @Field() @Column({ name: "created_at", type: "timestamptz" }) createdAt!: Date;
  @Column({ name: "updated_at", type: "timestamptz" }) updatedAt!: Date;

  /** UserResponse `username`: the email (DESIGN §3 Account schemas). */
  @Field({ description: "The email address." })
  get username(): string {
    return this.email;
  }
}
