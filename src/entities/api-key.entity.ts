/**
 * An API key. Only the SHA-256 of the key is stored; `prefix` is its first 12 characters. Also the
 * GraphQL `ApiKey` type (its `@Field` columns; `user` is resolved by `ApiKeyResolver`); the hash
 * and the ids are no fields. Its policy (issue 29, item 1): a budget per period, request and token
 * rates, the models it may use; `spend` is what the key has spent in its budget's current window,
 * read beside the row (`api_key_spend`) by `ApiKeyService`.
 */
import { Field, Float, Int, ObjectType } from "type-graphql";
import { Column, Entity, PrimaryColumn } from "typeorm";
import { bigintTransformer } from "./transformers.js";

/** The window a key's budget counts in: a UTC day, ISO week (from Monday), calendar month, or ever. */
export type BudgetPeriod = "day" | "week" | "month" | "total";

/** What a key with a budget has spent in its current window (micro-USD), and when the window ends. */
export interface ApiKeySpend {
  spentMicros: bigint;
  /** Null for a `total` budget, which never starts over. */
  resetsAt: Date | null;
}

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

  /** Micro-USD the key may spend per `budgetPeriod`; null: no budget (the team's credit only). */
  @Column({ name: "budget_micros", type: "bigint", nullable: true, transformer: bigintTransformer })
  budgetMicros!: bigint | null;

  @Field(() => String, { nullable: true, description: "day, week or month (UTC), or total; null without a budget." })
  @Column({ name: "budget_period", type: "text", nullable: true })
  budgetPeriod!: BudgetPeriod | null;

  @Field(() => Int, { nullable: true, description: "Requests per minute; null: not limited by the key." })
  @Column({ name: "rpm_limit", type: "integer", nullable: true })
  rpmLimit!: number | null;

  @Field(() => Int, { nullable: true, description: "Tokens (prompt + completion) per minute; null: not limited." })
  @Column({ name: "tpm_limit", type: "integer", nullable: true })
  tpmLimit!: number | null;

  /** Model ids the key may use; null: every model (`["*"]` as the API shows it). */
  @Column({ name: "allowed_models", type: "text", array: true, nullable: true })
  allowedModels!: string[] | null;

  /** Set by `ApiKeyService` for keys with a budget; undefined/null otherwise. */
  spend?: ApiKeySpend | null;

  /** `budget_micros` as a GraphQL Float (an integer; exact below 2^53 micro-USD). */
  @Field(() => Float, { name: "budgetMicros", nullable: true, description: "Micro-USD per budget period." })
  get budgetMicrosNumber(): number | null {
    return this.budgetMicros === null ? null : Number(this.budgetMicros);
  }

  @Field(() => [String], { name: "allowedModels", description: 'Model ids the key may use; ["*"]: every model.' })
  get allowedModelsOrAll(): string[] {
    return this.allowedModels ?? ["*"];
  }

  @Field(() => Float, {
    nullable: true,
    description: "Micro-USD spent in the budget's current period; null without a budget.",
  })
  get spentMicros(): number | null {
    return this.budgetMicros === null ? null : Number(this.spend?.spentMicros ?? 0n);
  }

  @Field(() => Float, { nullable: true, description: "Micro-USD left in the current period; null without a budget." })
  get remainingMicros(): number | null {
    if (this.budgetMicros === null) return null;
    const left = this.budgetMicros - (this.spend?.spentMicros ?? 0n);
    return Number(left > 0n ? left : 0n);
  }

  @Field(() => Date, {
    nullable: true,
    description: "When the budget's period starts over; null for total or no budget.",
  })
  get budgetResetsAt(): Date | null {
    return this.budgetMicros === null ? null : (this.spend?.resetsAt ?? null);
  }
}
