/**
 * Team factories through the public API (issue 8): invitations, and members made the way users
 * join a team (an owner or admin invites, the invitee signs up with the token).
 */
import { randomBytes } from "node:crypto";
import { type TestUser, http } from "./harness.js";

export type Role = "owner" | "admin" | "member";

/** A fresh address nobody has registered. */
export function freshEmail(tag = "invitee"): string {
  return `${tag}-${randomBytes(5).toString("hex")}@example.com`;
}

/** `POST /control/v1/teams/me/members` as `token`. */
export function invite(base: string, token: string, email: string, role?: Role) {
  return http(base, "POST", "/control/v1/teams/me/members", { token, body: role ? { email, role } : { email } });
}

/** Invites a fresh address into `inviter`'s team with `role`, and signs it up with the token. */
export async function joinTeam(base: string, inviter: TestUser, role: Role = "member"): Promise<TestUser> {
  const email = freshEmail(role);
  const invited = await invite(base, inviter.token, email, role);
  if (invited.status !== 201) throw new Error(`invite failed: ${invited.status} ${invited.text}`);
  const password = "correct horse battery";
  const res = await http(base, "POST", "/control/v1/auth/signup", {
    body: { email, password, invite_token: invited.body.invite_token },
  });
  if (res.status !== 201) throw new Error(`signup with invitation failed: ${res.status} ${res.text}`);
  return { email, password, token: res.body.access_token, userId: res.body.user.id, teamId: res.body.user.team_id };
}
