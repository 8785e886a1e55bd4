/**
 * A member of a team as the control plane shows it (spec: Team and member): an active user of the
 * team, or a pending invitation (`is_active: false`, DESIGN §3 Roles). Read from the
 * `team_members` view (migrations 1764620000000, 1764745000000: unexpired invitations only); also the GraphQL `TeamMember` type, whose `user`
 * is resolved by `TeamMemberResolver`.
 */
import { Field, ObjectType } from "type-graphql";
import { ViewColumn, ViewEntity } from "typeorm";
import type { TeamRole } from "./user.entity.js";

@ObjectType("TeamMember")
@ViewEntity({ name: "team_members", synchronize: false })
export class TeamMemberEntity {
  @ViewColumn({ name: "team_id" })
  teamId!: string;

  @Field({ description: "The user's id; for a pending invitation, the id the invited user has or will get." })
  @ViewColumn({ name: "user_id" })
  userId!: string;

  @Field()
  @ViewColumn()
  email!: string;

  @Field(() => String, { description: "owner, admin or member." })
  @ViewColumn()
  role!: TeamRole;

  @Field({ description: "False until the invitation is accepted (and for a deactivated account)." })
  @ViewColumn({ name: "is_active" })
  isActive!: boolean;

  @Field({ description: "When the user joined the team, or when the invitation was made." })
  @ViewColumn({ name: "created_at" })
  createdAt!: Date;

  /** The pending invitation this member stands for; null for an active user. */
  @ViewColumn({ name: "invitation_id" })
  invitationId!: string | null;
}
