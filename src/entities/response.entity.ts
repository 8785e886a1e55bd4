/** A stored Response object (`store: true`), as `GET /v1/responses/{id}` returns it. */
import { Column, Entity, PrimaryColumn } from "typeorm";

@Entity("responses")
export class ResponseEntity {
  @PrimaryColumn("uuid") id!: string;
  @Column({ name: "team_id", type: "uuid" }) teamId!: string;
  @Column({ name: "user_id", type: "uuid", nullable: true }) userId!: string | null;
  @Column({ name: "api_key_id", type: "uuid", nullable: true }) apiKeyId!: string | null;
  @Column("text") model!: string;
  @Column("text") status!: string;
  @Column("boolean") background!: boolean;
  @Column({ name: "stream_id", type: "uuid", nullable: true }) streamId!: string | null;
  @Column({ type: "jsonb", nullable: true }) metadata!: Record<string, unknown> | null;
  @Column({ name: "request_json", type: "jsonb" }) requestJson!: unknown;
  @Column({ name: "response_json", type: "jsonb" }) responseJson!: Record<string, unknown>;
  @Column({ name: "created_at", type: "timestamptz" }) createdAt!: Date;
  @Column({ name: "completed_at", type: "timestamptz", nullable: true }) completedAt!: Date | null;
  @Column({ name: "updated_at", type: "timestamptz" }) updatedAt!: Date;
}
