/** Team resolver: the caller's team and its update. Inputs arrive in the REST spelling (see `MappedArg`). */
import { Ctx, Mutation, Query, Resolver } from "type-graphql";
import { MappedArg } from "../schema/mapped-arg.js";
import { TeamType, UpdateTeamInputType } from "../schema/team.types.js";
import type { RequestContext } from "../services/context.js";
import type { TeamDto, TeamService, UpdateTeamInput } from "../services/team.service.js";

@Resolver()
export class TeamResolver {
  constructor(private readonly teams: TeamService) {}

  @Query(() => TeamType, { description: "The caller's team with its members." })
  team(@Ctx() ctx: RequestContext): Promise<TeamDto> {
    return this.teams.get(ctx);
  }

  @Mutation(() => TeamType, { description: "Updates the caller's team (owners and admins)." })
  updateTeam(
    @MappedArg("input", () => UpdateTeamInputType, UpdateTeamInputType.toService) input: UpdateTeamInput,
    @Ctx() ctx: RequestContext,
  ): Promise<TeamDto> {
    return this.teams.update(ctx, input);
  }
}
