/**
 * A team: the unit that owns keys, credit, activity and resources. Also the GraphQL `Team` type
 * (issue 8: control-plane object types come from their entities): the `@Field` columns are its
 * fields; the caller's `role`, `members` and the signing-secret fields are resolved by
 * `TeamResolver`. Columns without `@Field` (credit, the signing secret) never leave through GraphQL.
 */
import { Field, ObjectType } from "type-graphql";
import { Column, Entity, PrimaryColumn } from "typeorm";
import { bigintTransformer } from "./transformers.js";

@ObjectType("Team")
@Entity("teams")
export class TeamEntity {
  @Field()
  @PrimaryColumn("uuid")
  id!: string;

  @Field()
  @Column("text")
  name!: string;

  @Field(() => String, { nullable: true, description: "The team's email domain (a lowercase host name), or null." })
  @Column({ name: "email_domain", type: "text", nullable: true })
  emailDomain!: string | null;

  @Field({ description: "When on, request and result bodies are not stored (tokens and cost still are)." })
  @Column({ name: "zero_data_retention_enabled", type: "boolean", default: false })
  zeroDataRetentionEnabled!: boolean;

  /** Current credit in micro-USD; mirrors the newest ledger row's `balance_after_micros`. */
  @Column({ name: "credit_balance_micros", type: "bigint", transformer: bigintTransformer })
  creditBalanceMicros!: bigint;

  /** The Standard Webhooks secret (`whsec_…`), or null. Never a GraphQL field: shown once, by the update that set it. */
  @Column({ name: "webhook_signing_secret", type: "text", nullable: true })
  webhookSigningSecret!: string | null;

  /** Set when the team was removed (a personal team left unused when its user joined another); its rows stay. */
  @Column({ name: "deleted_at", type: "timestamptz", nullable: true })
  deletedAt!: Date | null;

  @Field()
  @Column({ name: "created_at", type: "timestamptz" })
  createdAt!: Date;

  @Column({ name: "updated_at", type: "timestamptz" })
  updatedAt!: Date;
}
