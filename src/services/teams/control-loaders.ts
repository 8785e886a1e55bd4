/**
 * Per-request DataLoaders of the control plane (issue 8): the relations GraphQL resolves field by
 * field — team → members, member → user, key → user — are batched into one query per relation and
 * request, and cached for that request only (a later request sees later writes). The loaders of a
 * request hang off its `RequestContext` object (REST and GraphQL build one per request), so nothing
 * outlives the request. They load whatever ids they are given: the services that call them check
 * first that the ids are the caller's team's (`policy.ts`).
 */
import DataLoader from "dataloader";
import { type DataSource, In } from "typeorm";
import { TeamMemberEntity } from "../../entities/team-member.entity.js";
import { UserEntity } from "../../entities/user.entity.js";
import type { RequestContext } from "../platform/context.js";

/** The loaders of one request. */
export interface RequestLoaders {
  /** Members of each team (active users and pending invitations), oldest first. */
  membersByTeam: DataLoader<string, TeamMemberEntity[]>;
  /** Users by id; null for an id no user has (a pending invitation of an unregistered address). */
  userById: DataLoader<string, UserEntity | null>;
}

/** Makes and keeps the loaders of each request. One per process. */
export class ControlLoaders {
  private readonly byRequest = new WeakMap<RequestContext, RequestLoaders>();
  /** Queries run by loaders (for tests that check batching). */
  readonly stats = { membersQueries: 0, userQueries: 0 };

  constructor(private readonly ds: DataSource) {}

  /** The loaders of the request `ctx` stands for (made on first use). */
  for(ctx: RequestContext): RequestLoaders {
    let loaders = this.byRequest.get(ctx);
    if (!loaders) {
      loaders = {
        membersByTeam: new DataLoader((ids) => this.members(ids)),
        userById: new DataLoader((ids) => this.users(ids)),
      };
      this.byRequest.set(ctx, loaders);
    }
    return loaders;
  }

  private async members(teamIds: readonly string[]): Promise<TeamMemberEntity[][]> {
    this.stats.membersQueries++;
    const rows = await this.ds.getRepository(TeamMemberEntity).find({
      where: { teamId: In([...teamIds]) },
      order: { createdAt: "ASC", userId: "ASC" },
    });
    const byTeam = new Map<string, TeamMemberEntity[]>(teamIds.map((id) => [id, []]));
    for (const row of rows) byTeam.get(row.teamId)?.push(row);
    return teamIds.map((id) => byTeam.get(id)!);
  }

  private async users(ids: readonly string[]): Promise<Array<UserEntity | null>> {
    this.stats.userQueries++;
    const rows = await this.ds.getRepository(UserEntity).findBy({ id: In([...ids]) });
    const byId = new Map(rows.map((u) => [u.id, u]));
    return ids.map((id) => byId.get(id) ?? null);
  }
}
