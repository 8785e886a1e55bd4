/**
 * GraphQL types of the caller's team (spec: Team and member): outputs keep the DTO properties
 * under camelCase GraphQL names; the input maps GraphQL names to the service's (see `mapped-arg.ts`).
 */
import { Field, InputType, ObjectType } from "type-graphql";
import type { TeamRole } from "../entities/user.entity.js";
import type { TeamDto, TeamMemberDto, UpdateTeamInput } from "../services/team.service.js";

@ObjectType("TeamMember")
export class TeamMemberType implements TeamMemberDto {
  @Field({ name: "userId" }) user_id!: string;
  @Field() email!: string;
  @Field(() => String) role!: TeamRole;
  @Field({ name: "isActive" }) is_active!: boolean;
  @Field({ name: "createdAt" }) created_at!: Date;
}

@ObjectType("Team")
export class TeamType implements TeamDto {
  @Field() id!: string;
  @Field() name!: string;
  @Field(() => String, { name: "emailDomain", nullable: true }) email_domain!: string | null;
  @Field(() => String, { description: "The caller's role in the team." }) role!: TeamRole;
  @Field({ name: "zeroDataRetentionEnabled" }) zero_data_retention_enabled!: boolean;
  @Field(() => [TeamMemberType]) members!: TeamMemberDto[];
  @Field({ name: "hasWebhookSigningSecret" }) has_webhook_signing_secret!: boolean;
  @Field(() => String, {
    name: "webhookSigningSecret",
    nullable: true,
    description: "The signing secret, only in the answer of the update that set it (shown once).",
  })
  webhook_signing_secret?: string;
}

@InputType("UpdateTeamInput")
export class UpdateTeamInputType {
  @Field(() => String, {
    nullable: true,
    description:
      'A Standard Webhooks secret (`whsec_` + base64 of 24–64 bytes), "rotate" for a new one, or null to remove it.',
  })
  webhookSigningSecret?: string | null;

  /** The service's input (REST names); an explicit null removes the secret, an absent field keeps it. */
  static toService(input: UpdateTeamInputType): UpdateTeamInput {
    return "webhookSigningSecret" in input ? { webhook_signing_secret: input.webhookSigningSecret ?? null } : {};
  }
}
