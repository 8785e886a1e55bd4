/**
 * An API key. Only the SHA-256 of the key is stored; `prefix` is its first 12 characters. Also the
 * GraphQL `ApiKey` type (its `@Field` columns; `user` is resolved by `ApiKeyResolver`); the hash
 * and the ids are no fields.
 */
import { Field, ObjectType } from "type-graphql";
import { Column, Entity, PrimaryColumn } from "typeorm";

@ObjectType("ApiKey")
@Entity("api_keys")
export class ApiKeyEntity {
  @Field()
  @PrimaryColumn("uuid")
  id!: string;

  @Column({ name: "team_id", type: "uuid" })
  teamId!: string;

  /** The key's owner (a member of `teamId`). */
  @Column({ name: "user_id", type: "uuid" })
  userId!: string;

  @Field()
  @Column("text")
  name!: string;

  @Field({ description: "The key's first 12 characters." })
  @Column("text")
  prefix!: string;

  @Column({ name: "key_hash", type: "bytea" })
  keyHash!: Buffer;

  @Field()
  @Column({ name: "created_at", type: "timestamptz" })
  createdAt!: Date;

  @Field(() => Date, { nullable: true })
  @Column({ name: "last_used_at", type: "timestamptz", nullable: true })
  lastUsedAt!: Date | null;

  @Field(() => Date, { nullable: true })
  @Column({ name: "expires_at", type: "timestamptz", nullable: true })
  expiresAt!: Date | null;

  @Field(() => Date, { nullable: true })
  @Column({ name: "revoked_at", type: "timestamptz", nullable: true })
  revokedAt!: Date | null;
}
