/** An API key. Only the SHA-256 of the key is stored; `prefix` is its first 12 characters. */
import { Column, Entity, PrimaryColumn } from "typeorm";

@Entity("api_keys")
export class ApiKeyEntity {
  @PrimaryColumn("uuid") id!: string;
  @Column({ name: "team_id", type: "uuid" }) teamId!: string;
  @Column({ name: "user_id", type: "uuid" }) userId!: string;
  @Column("text") name!: string;
  @Column("text") prefix!: string;
  @Column({ name: "key_hash", type: "bytea" }) keyHash!: Buffer;
  @Column({ name: "created_at", type: "timestamptz" }) createdAt!: Date;
  @Column({ name: "last_used_at", type: "timestamptz", nullable: true }) lastUsedAt!: Date | null;
  @Column({ name: "expires_at", type: "timestamptz", nullable: true }) expiresAt!: Date | null;
  @Column({ name: "revoked_at", type: "timestamptz", nullable: true }) revokedAt!: Date | null;
}
