/**
 * GraphQL types of teams and members (spec: Team and member). `Team` and `TeamMember` are their
 * entities (`entities/team.entity.ts`, `entities/team-member.entity.ts`); here are the answers
 * that wrap them and the inputs, whose properties use the GraphQL names and map to the service's
 * REST-spelled input (see `mapped-arg.ts`).
 */
import { Field, InputType, ObjectType } from "type-graphql";
import { TeamMemberEntity } from "../entities/team-member.entity.js";
import type { InviteMemberInput, InvitedMember, UpdateMemberInput } from "../services/teams/member.service.js";
import type { UpdateTeamInput } from "../services/teams/team.service.js";
import { LoginResultType } from "./account.types.js";
import { absent } from "./mapped-arg.js";

@ObjectType("InvitedMember", { description: "A new invitation: the pending member and its token (shown this once)." })
export class InvitedMemberType implements InvitedMember {
  @Field(() => TeamMemberEntity) member!: TeamMemberEntity;
  @Field({ description: "Also mailed to the address; used by acceptInvitation or signup." }) inviteToken!: string;
}

@ObjectType("AcceptedInvitation", { description: "The user in their new team, and an access token for it." })
export class AcceptedInvitationType extends LoginResultType {
  @Field() message!: string;
}

@InputType("UpdateTeamInput", { description: "Fields left out keep their values." })
export class UpdateTeamInputType {
  @Field(() => String, { nullable: true, description: "1 to 200 characters." })
  name?: string | null;

  @Field(() => String, { nullable: true, description: "A domain name such as example.com, or null to clear it." })
  emailDomain?: string | null;

  @Field(() => Boolean, { nullable: true })
  zeroDataRetentionEnabled?: boolean | null;

  @Field(() => String, {
    nullable: true,
    description:
      'A Standard Webhooks secret (`whsec_` + base64 of 24–64 bytes), "rotate" for a new one, or null to remove it.',
  })
  webhookSigningSecret?: string | null;

  /**
   * The service's input (REST names): a field given (null included) is passed on as given, so the
   * service answers it as REST would (null clears `email_domain` and the secret, and is a 400 for
   * `name` and `zero_data_retention_enabled`); an absent field keeps its value.
   */
  static toService(input: UpdateTeamInputType): UpdateTeamInput {
    const out: Record<string, unknown> = {};
    if ("name" in input) out.name = input.name;
    if ("emailDomain" in input) out.email_domain = input.emailDomain;
    if ("zeroDataRetentionEnabled" in input) out.zero_data_retention_enabled = input.zeroDataRetentionEnabled;
    if ("webhookSigningSecret" in input) out.webhook_signing_secret = input.webhookSigningSecret ?? null;
    return out as UpdateTeamInput;
  }
}

@InputType("InviteMemberInput")
export class InviteMemberInputType {
  @Field() email!: string;
  @Field(() => String, { nullable: true, description: "owner, admin or member (default)." }) role?: string | null;

  /** The service's input (REST names). */
  static toService(input: InviteMemberInputType): InviteMemberInput {
    return { email: input.email, role: absent(input.role) as InviteMemberInput["role"] };
  }
}

@InputType("UpdateMemberInput")
export class UpdateMemberInputType {
  @Field({ description: "owner, admin or member." }) role!: string;

  /** The service's input (REST names). */
  static toService(input: UpdateMemberInputType): UpdateMemberInput {
    return { role: input.role as UpdateMemberInput["role"] };
  }
}
