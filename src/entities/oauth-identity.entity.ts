/**
 * A provider identity linked to a user (issue 8, item 2): `(provider, subject)` is unique, so an
 * identity signs in to exactly one account.
 */
import { Column, Entity, PrimaryColumn } from "typeorm";

@Entity("oauth_identities")
export class OAuthIdentityEntity {
  @PrimaryColumn("uuid") id!: string;
  /** The configured provider name. */
  @Column("text") provider!: string;
  /** The provider's `sub` claim. */
  @Column("text") subject!: string;
  @Column({ name: "user_id", type: "uuid" }) userId!: string;
  /** The email the provider reported at link time; null when it shared none. */
  @Column({ type: "text", nullable: true }) email!: string | null;
  @Column({ name: "email_verified", type: "boolean" }) emailVerified!: boolean;
  @Column({ name: "created_at", type: "timestamptz" }) createdAt!: Date;
}
