/**
 * One API process's reserved slice of a team's credit (issue 5, item 2). Written only by
 * `CreditService` (acquire, renew, release) and by the metering group commit (charges).
 */
import { Column, Entity, PrimaryColumn } from "typeorm";
import { bigintTransformer } from "./transformers.js";

@Entity("credit_leases")
export class CreditLeaseEntity {
  @PrimaryColumn({ name: "team_id", type: "uuid" }) teamId!: string;
  /** The holding process (a random UUID per process start). */
  @PrimaryColumn("uuid") holder!: string;
  /** Micro-USD of the team's balance reserved by this holder and not yet charged. */
  @Column({ type: "bigint", transformer: bigintTransformer }) micros!: bigint;
  /** After this the lease counts for nothing (its holder stopped renewing: it is gone). */
  @Column({ name: "expires_at", type: "timestamptz" }) expiresAt!: Date;
  @Column({ name: "updated_at", type: "timestamptz" }) updatedAt!: Date;
}
