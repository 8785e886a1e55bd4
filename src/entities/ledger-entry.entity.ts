/** One row of the append-only credit ledger (a database trigger refuses UPDATE and DELETE). */
import { Column, Entity, PrimaryColumn } from "typeorm";
import { bigintTransformer } from "./transformers.js";

export type LedgerEntryType = "grant" | "usage" | "top_up" | "adjustment" | "refund";

@Entity("credit_ledger")
export class LedgerEntryEntity {
  @PrimaryColumn("uuid") id!: string;
  @Column({ name: "team_id", type: "uuid" }) teamId!: string;
  @Column("text") type!: LedgerEntryType;
  /** Signed micro-USD: positive credits, negative charges. */
  @Column({ name: "amount_micros", type: "bigint", transformer: bigintTransformer }) amountMicros!: bigint;
  @Column({ name: "balance_after_micros", type: "bigint", transformer: bigintTransformer }) balanceAfterMicros!: bigint;
  /** Unique per type: the request id of a usage charge, the team id of a signup grant, … */
  @Column({ name: "source_id", type: "text" }) sourceId!: string;
  @Column("text") description!: string;
  @Column({ name: "external_provider", type: "text", nullable: true }) externalProvider!: string | null;
  @Column({ name: "external_payment_id", type: "text", nullable: true }) externalPaymentId!: string | null;
  @Column({ name: "created_at", type: "timestamptz" }) createdAt!: Date;
}
