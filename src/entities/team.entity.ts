/** A team: the unit that owns keys, credit, activity and resources. */
import { Column, Entity, PrimaryColumn } from "typeorm";
import { bigintTransformer } from "./transformers.js";

@Entity("teams")
export class TeamEntity {
  @PrimaryColumn("uuid") id!: string;
  @Column("text") name!: string;
  @Column({ name: "email_domain", type: "text", nullable: true }) emailDomain!: string | null;
  @Column({ name: "zero_data_retention_enabled", type: "boolean", default: false }) zeroDataRetentionEnabled!: boolean;
  /** Current credit in micro-USD; mirrors the newest ledger row's `balance_after_micros`. */
  @Column({ name: "credit_balance_micros", type: "bigint", transformer: bigintTransformer })
  creditBalanceMicros!: bigint;
  @Column({ name: "created_at", type: "timestamptz" }) createdAt!: Date;
  @Column({ name: "updated_at", type: "timestamptz" }) updatedAt!: Date;
}
