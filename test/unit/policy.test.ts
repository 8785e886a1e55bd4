/**
 * The policy's rules that no endpoint exercises yet (activity and usage scopes, DESIGN §3 Roles),
 * and its role table as DESIGN states it. The endpoints' answers are in authorization-matrix.test.ts.
 */
import type { TeamRole } from "../../src/entities/user.entity.js";
import type { RequestContext } from "../../src/services/platform/context.js";
import {
  ROLE_PERMISSIONS,
  apiKeyScope,
  authorizeMemberChange,
  authorizeRoleGrant,
  inTeam,
  usageScope,
} from "../../src/services/platform/policy.js";
import { AppError } from "../../src/shared/errors.js";

const TEAM = "0190aaaa-0000-7000-8000-000000000001";
const ME = "0190aaaa-0000-7000-8000-000000000002";
const OTHER_USER = "0190aaaa-0000-7000-8000-000000000003";

function ctxOf(role: TeamRole): RequestContext {
  return { requestId: "r", principal: { userId: ME, teamId: TEAM, role, email: "me@example.com", apiKey: null } };
}

function statusOf(fn: () => unknown): number {
  try {
    fn();
    return 200;
  } catch (err) {
    if (err instanceof AppError) return err.status;
    throw err;
  }
}

test("when DESIGN §3 Roles is read against the table, then owners and admins hold every permission and members their own", () => {
  expect([...ROLE_PERMISSIONS.owner].sort()).toEqual([...ROLE_PERMISSIONS.admin].sort());
  expect([...ROLE_PERMISSIONS.member].sort()).toEqual([
    "apiKeys.manageOwn",
    "deployments.read",
    "models.read",
    "team.read",
    "usage.readOwn",
    "webhooks.read",
  ]);
  for (const p of ROLE_PERMISSIONS.member) expect(ROLE_PERMISSIONS.owner.has(p)).toBe(true);
  expect(ROLE_PERMISSIONS.owner.has("webhooks.redeliver")).toBe(true);
});

describe("usageScope (activity and usage)", () => {
  test("when owners and admins read, then they see everyone's or filter to one member", () => {
    for (const role of ["owner", "admin"] as const) {
      expect(usageScope(ctxOf(role))).toEqual({ teamId: TEAM, userId: null });
      expect(usageScope(ctxOf(role), OTHER_USER)).toEqual({ teamId: TEAM, userId: OTHER_USER });
    }
  });

  test("when a member reads, then only their own; naming themselves is fine, anyone else is 403", () => {
    expect(usageScope(ctxOf("member"))).toEqual({ teamId: TEAM, userId: ME });
    expect(usageScope(ctxOf("member"), ME)).toEqual({ teamId: TEAM, userId: ME });
    expect(statusOf(() => usageScope(ctxOf("member"), OTHER_USER))).toBe(403);
  });

  test("when nobody is signed in, then 401", () => {
    expect(statusOf(() => usageScope({ requestId: "r" }))).toBe(401);
  });
});

test("when keys are listed, then managers see the team's and members their own", () => {
  expect(apiKeyScope(ctxOf("admin"))).toEqual({ teamId: TEAM, userId: null });
  expect(apiKeyScope(ctxOf("member"))).toEqual({ teamId: TEAM, userId: ME });
});

test("when roles are granted or owners touched, then only owners may make or change owners", () => {
  expect(statusOf(() => authorizeRoleGrant(ctxOf("owner"), "owner"))).toBe(200);
  expect(statusOf(() => authorizeRoleGrant(ctxOf("admin"), "owner"))).toBe(403);
  expect(statusOf(() => authorizeRoleGrant(ctxOf("admin"), "admin"))).toBe(200);
  expect(statusOf(() => authorizeRoleGrant(ctxOf("member"), "member"))).toBe(403);
  expect(statusOf(() => authorizeMemberChange(ctxOf("admin"), { role: "owner" }))).toBe(403);
  expect(statusOf(() => authorizeMemberChange(ctxOf("admin"), { role: "admin" }))).toBe(200);
});

test("when a resource is another team's or missing, then 404", () => {
  const principal = ctxOf("owner").principal!;
  expect(inTeam(principal, { teamId: TEAM, id: 1 }, "Thing")).toEqual({ teamId: TEAM, id: 1 });
  expect(statusOf(() => inTeam(principal, { teamId: "elsewhere" }, "Thing"))).toBe(404);
  expect(statusOf(() => inTeam(principal, null, "Thing"))).toBe(404);
});
