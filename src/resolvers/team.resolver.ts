/**
 * Team resolvers (issue 8, items 3, 4 and 6): the caller's team, its update, members and
 * invitations, over GraphQL and (through the REST table) REST. Each method is one service call;
 * who may do what is decided by the services (`policy.ts`). `Team` and `TeamMember` are entities;
 * their relations (members, each member's user) go through per-request DataLoaders. Inputs arrive
 * in the REST spelling (see `MappedArg`).
 */
import { Arg, Ctx, FieldResolver, ID, Mutation, Query, Resolver, Root } from "type-graphql";
import { TeamEntity } from "../entities/team.entity.js";
import { TeamMemberEntity } from "../entities/team-member.entity.js";
import { type TeamRole, UserEntity } from "../entities/user.entity.js";
import { MappedArg } from "../schema/mapped-arg.js";
import {
  AcceptedInvitationType,
  InviteMemberInputType,
  InvitedMemberType,
  UpdateMemberInputType,
  UpdateTeamInputType,
} from "../schema/team.types.js";
import type { LoginResultDto } from "../services/accounts/account.service.js";
import type { RequestContext } from "../services/platform/context.js";
import type {
  InviteMemberInput,
  InvitedMember,
  MemberService,
  UpdateMemberInput,
} from "../services/teams/member.service.js";
import type { TeamService, UpdateTeamInput } from "../services/teams/team.service.js";

/** `POST /control/v1/teams/invitations/{token}/accept` answer: a login result with a message. */
export interface AcceptedInvitationDto extends LoginResultDto {
  message: string;
}

@Resolver(() => TeamEntity)
export class TeamResolver {
  constructor(
    private readonly teams: TeamService,
    private readonly memberService: MemberService,
  ) {}

  @Query(() => TeamEntity, { description: "The caller's team with its members." })
  team(@Ctx() ctx: RequestContext): Promise<TeamEntity> {
    return this.teams.get(ctx);
  }

  @Mutation(() => TeamEntity, { description: "Updates the caller's team (owners and admins)." })
  updateTeam(
    @MappedArg("input", () => UpdateTeamInputType, UpdateTeamInputType.toService) input: UpdateTeamInput,
    @Ctx() ctx: RequestContext,
  ): Promise<TeamEntity> {
    return this.teams.update(ctx, input);
  }

  @FieldResolver(() => String, { description: "The caller's role in the team." })
  role(@Root() team: TeamEntity, @Ctx() ctx: RequestContext): TeamRole {
    return this.teams.callerRole(ctx, team);
  }

  @FieldResolver(() => [TeamMemberEntity], {
    description: "Active members and pending invitations (isActive false), oldest first.",
  })
  members(@Root() team: TeamEntity, @Ctx() ctx: RequestContext): Promise<TeamMemberEntity[]> {
    return this.memberService.membersOf(ctx, team);
  }

  @FieldResolver(() => Boolean)
  hasWebhookSigningSecret(@Root() team: TeamEntity): boolean {
    return this.teams.hasSigningSecret(team);
  }

  @FieldResolver(() => String, {
    nullable: true,
    description: "The signing secret, only in the answer of the update that set it (shown once).",
  })
  webhookSigningSecret(@Root() team: TeamEntity): string | null {
    return this.teams.signingSecretShown(team);
  }

  @Mutation(() => InvitedMemberType, {
    description: "Invites an address into the team (owners and admins): mailed, and its token shown this once.",
  })
  inviteMember(
    @MappedArg("input", () => InviteMemberInputType, InviteMemberInputType.toService) input: InviteMemberInput,
    @Ctx() ctx: RequestContext,
  ): Promise<InvitedMember> {
    return this.memberService.invite(ctx, input);
  }

  @Mutation(() => TeamMemberEntity, {
    description: "Changes a member's role (owners and admins; only owners touch owners).",
  })
  updateMember(
    @Arg("userId", () => ID) userId: string,
    @MappedArg("input", () => UpdateMemberInputType, UpdateMemberInputType.toService) input: UpdateMemberInput,
    @Ctx() ctx: RequestContext,
  ): Promise<TeamMemberEntity> {
    return this.memberService.updateRole(ctx, userId, input);
  }

  @Mutation(() => Boolean, {
    description: "Removes a member (revoking their keys for the team) or withdraws an invitation; true when done.",
  })
  async removeMember(@Arg("userId", () => ID) userId: string, @Ctx() ctx: RequestContext): Promise<boolean> {
    await this.memberService.remove(ctx, userId);
    return true;
  }

  @Mutation(() => AcceptedInvitationType, {
    description: "Joins the team of an invitation made for the caller's email; answers a token for the new team.",
  })
  async acceptInvitation(
    @Arg("token", () => String) token: string,
    @Ctx() ctx: RequestContext,
  ): Promise<AcceptedInvitationDto> {
    const accepted = await this.memberService.accept(ctx, token);
    return { message: "Invitation accepted.", ...accepted.token, user: accepted.user };
  }
}

/** The user behind each member (batched per request). */
@Resolver(() => TeamMemberEntity)
export class TeamMemberResolver {
  constructor(private readonly members: MemberService) {}

  @FieldResolver(() => UserEntity, {
    nullable: true,
    description: "The member's account; null for a pending invitation.",
  })
  async user(@Root() member: TeamMemberEntity, @Ctx() ctx: RequestContext): Promise<UserEntity | null> {
    return this.members.userOf(ctx, member);
  }
}
