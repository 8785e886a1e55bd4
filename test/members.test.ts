/**
 * Members, invitations and roles (issue 8, item 4; DESIGN §3 Roles), end to end over REST and
 * GraphQL: invite → the mail in `mail_outbox` → accept (or signup with the token) → member active;
 * the 409s (data in the team being left, the last owner), removal revoking keys, bad input that
 * changes nothing, 401s and other teams' members (404).
 */
import {
  type TestServer,
  createTestApiKey,
  createTestUser,
  expectEnvelope,
  expectInvalid,
  http,
  startTestServer,
} from "./support/harness.js";
import { freshEmail, invite, joinTeam } from "./support/teams.js";

let server: TestServer;

beforeAll(async () => {
  server = await startTestServer();
});
afterAll(() => server.close());

const team = (token: string) => http(server.url, "GET", "/control/v1/teams/me", { token });
const me = (token: string) => http(server.url, "GET", "/control/v1/auth/me", { token });
const accept = (token: string | undefined, inviteToken: string) =>
  http(server.url, "POST", `/control/v1/teams/invitations/${encodeURIComponent(inviteToken)}/accept`, { token });
const patchMember = (token: string | undefined, userId: string, body: unknown) =>
  http(server.url, "PATCH", `/control/v1/teams/me/members/${userId}`, { token, body });
const deleteMember = (token: string | undefined, userId: string) =>
  http(server.url, "DELETE", `/control/v1/teams/me/members/${userId}`, { token });
const dataPlaneMe = (key: string) => http(server.url, "GET", "/v1/auth/me", { token: key });

/** Everything a member change could touch, to compare before and after a refused call. */
async function snapshot(teamId: string) {
  const [users, invitations, keys, teams, mail] = await Promise.all([
    server.db("SELECT id, team_id, role, tokens_valid_after FROM users ORDER BY id"),
    server.db("SELECT id, role, accepted_at, revoked_at FROM team_invitations WHERE team_id = $1 ORDER BY id", [
      teamId,
    ]),
    server.db("SELECT id, revoked_at FROM api_keys ORDER BY id"),
    server.db("SELECT id, name, email_domain, zero_data_retention_enabled, deleted_at FROM teams ORDER BY id"),
    server.db("SELECT count(*)::int AS n FROM mail_outbox"),
  ]);
  return { users, invitations, keys, teams, mail };
}

describe("POST /control/v1/teams/me/members", () => {
  test("when the owner invites an address, then 201 with a pending member and its token, which is mailed and never shown again", async () => {
    const owner = await createTestUser(server.url);
    const email = freshEmail();
    const res = await invite(server.url, owner.token, email);
    expect(res.status).toBe(201);
    expect(res.body).toEqual({
      user_id: expect.stringMatching(/^[0-9a-f-]{36}$/),
      email,
      role: "member",
      is_active: false,
      created_at: expect.any(String),
      invite_token: expect.stringMatching(/^inv_[A-Za-z0-9_-]{43}$/),
    });
    const mails = await server.db<{ kind: string; subject: string; body_text: string }>(
      "SELECT kind, subject, body_text FROM mail_outbox WHERE to_address = $1",
      [email],
    );
    expect(mails).toHaveLength(1);
    expect(mails[0].kind).toBe("invitation");
    expect(mails[0].body_text).toContain(res.body.invite_token);
    // Only the token's hash is stored.
    const [stored] = await server.db<{ token_hash: Buffer }>(
      "SELECT token_hash FROM team_invitations WHERE email = $1",
      [email],
    );
    expect(stored.token_hash).toHaveLength(32);
    const read = await team(owner.token);
    expect(read.body.members).toEqual([
      expect.objectContaining({ user_id: owner.userId, role: "owner", is_active: true }),
      { user_id: res.body.user_id, email, role: "member", is_active: false, created_at: res.body.created_at },
    ]);
    expect(read.text).not.toContain(res.body.invite_token);
  });

  test("when the invitee signs up with the token, then they join the team with its role under the announced user id, and the token is used up", async () => {
    const owner = await createTestUser(server.url);
    const email = freshEmail();
    const invited = await invite(server.url, owner.token, email, "admin");
    const signup = await http(server.url, "POST", "/control/v1/auth/signup", {
      body: { email, password: "correct horse battery", invite_token: invited.body.invite_token },
    });
    expect(signup.status).toBe(201);
    expect(signup.body.user).toMatchObject({ id: invited.body.user_id, team_id: owner.teamId, role: "admin" });
    expect((await me(signup.body.access_token)).body).toMatchObject({ team_id: owner.teamId, role: "admin" });
    const members = (await team(owner.token)).body.members;
    expect(members).toContainEqual(expect.objectContaining({ user_id: invited.body.user_id, is_active: true }));
    expect(members).toHaveLength(2);
    // No team of their own was made, and no signup credit granted.
    const [teams] = await server.db<{ n: number }>("SELECT count(*)::int AS n FROM teams WHERE name LIKE $1", [
      `${email.split("@")[0]}%`,
    ]);
    expect(teams.n).toBe(0);
    const again = await http(server.url, "POST", "/control/v1/auth/signup", {
      body: { email: freshEmail(), password: "correct horse battery", invite_token: invited.body.invite_token },
    });
    expectEnvelope(again, 404);
  });

  test("when a signup uses an invitation made for another address, then 403 and nothing is created", async () => {
    const owner = await createTestUser(server.url);
    const invited = await invite(server.url, owner.token, freshEmail());
    const other = freshEmail();
    const res = await http(server.url, "POST", "/control/v1/auth/signup", {
      body: { email: other, password: "correct horse battery", invite_token: invited.body.invite_token },
    });
    expectEnvelope(res, 403);
    expect(await server.db("SELECT 1 FROM users WHERE email = $1", [other])).toHaveLength(0);
  });

  test("when the address is already a member, then 409; inviting a pending address again replaces its token", async () => {
    const owner = await createTestUser(server.url);
    const member = await joinTeam(server.url, owner);
    expectEnvelope(await invite(server.url, owner.token, member.email.toUpperCase()), 409);
    expectEnvelope(await invite(server.url, owner.token, owner.email), 409);

    const email = freshEmail();
    const first = await invite(server.url, owner.token, email);
    const second = await invite(server.url, owner.token, email, "admin");
    expect(second.status).toBe(201);
    expect(second.body.user_id).toBe(first.body.user_id);
    const pending = (await team(owner.token)).body.members.filter((m: { email: string }) => m.email === email);
    expect(pending).toEqual([expect.objectContaining({ role: "admin", is_active: false })]);
    const user = await createTestUser(server.url, { email });
    expectEnvelope(await accept(user.token, first.body.invite_token), 404);
    expect((await accept(user.token, second.body.invite_token)).status).toBe(200);
  });

  test("when the body is bad, then 400 names the field and nothing is stored or mailed", async () => {
    const owner = await createTestUser(server.url);
    const before = await snapshot(owner.teamId);
    for (const [body, field] of [
      [{}, "email"],
      [{ email: "not-an-address" }, "email"],
      [{ email: 5 }, "email"],
      [{ email: freshEmail(), role: "king" }, "role"],
      [{ email: freshEmail(), role: 1 }, "role"],
      [{ email: "nul\u0000@example.com" }, "email"],
    ] as const) {
      expectInvalid(
        await http(server.url, "POST", "/control/v1/teams/me/members", { token: owner.token, body }),
        field,
      );
    }
    expectEnvelope(
      await http(server.url, "POST", "/control/v1/teams/me/members", { token: owner.token, body: "[1]" }),
      400,
    );
    expect(await snapshot(owner.teamId)).toEqual(before);
  });

  test("when no credentials are presented, then 401 on every member endpoint", async () => {
    const owner = await createTestUser(server.url);
    expectEnvelope(await invite(server.url, "", freshEmail()), 401);
    expectEnvelope(await patchMember(undefined, owner.userId, { role: "admin" }), 401);
    expectEnvelope(await deleteMember(undefined, owner.userId), 401);
    const invited = await invite(server.url, owner.token, freshEmail());
    expectEnvelope(await accept(undefined, invited.body.invite_token), 401);
  });
});

describe("POST /control/v1/teams/invitations/{token}/accept", () => {
  test("when a registered user accepts, then they move into the team with a new token; their unused personal team is removed and old credentials stop working", async () => {
    const owner = await createTestUser(server.url);
    const user = await createTestUser(server.url);
    const oldKey = await createTestApiKey(server.url, user.token);
    const invited = await invite(server.url, owner.token, user.email, "admin");
    expect(invited.body.user_id).toBe(user.userId);

    const res = await accept(user.token, invited.body.invite_token);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      message: "Invitation accepted.",
      access_token: expect.any(String),
      token_type: "bearer",
      expires_in: expect.any(Number),
      user: expect.objectContaining({ id: user.userId, team_id: owner.teamId, role: "admin" }),
    });
    const fresh = res.body.access_token;
    expect((await me(fresh)).body).toMatchObject({ team_id: owner.teamId, role: "admin" });
    expect((await team(fresh)).body).toMatchObject({ id: owner.teamId, role: "admin" });
    expect((await team(owner.token)).body.members).toContainEqual(
      expect.objectContaining({ user_id: user.userId, role: "admin", is_active: true }),
    );
    expectEnvelope(await me(user.token), 401);
    expectEnvelope(await dataPlaneMe(oldKey.key), 401);
    const [old] = await server.db<{ deleted_at: Date | null }>("SELECT deleted_at FROM teams WHERE id = $1", [
      user.teamId,
    ]);
    expect(old.deleted_at).not.toBeNull();
    // Used once.
    expectEnvelope(await accept(fresh, invited.body.invite_token), 404);
  });

  test("when the invitation names another email, then 403 and it stays usable; unknown tokens are 404", async () => {
    const owner = await createTestUser(server.url);
    const email = freshEmail();
    const invited = await invite(server.url, owner.token, email);
    const stranger = await createTestUser(server.url);
    expectEnvelope(await accept(stranger.token, invited.body.invite_token), 403);
    expectEnvelope(await accept(stranger.token, "inv_unknown"), 404);
    expectEnvelope(await accept(stranger.token, "x".repeat(600)), 404);
    const user = await createTestUser(server.url, { email });
    expect((await accept(user.token, invited.body.invite_token)).status).toBe(200);
  });

  test("when the invitation expired or was withdrawn, then 404", async () => {
    const owner = await createTestUser(server.url);
    const user = await createTestUser(server.url);
    const expired = await invite(server.url, owner.token, user.email);
    await server.db("UPDATE team_invitations SET expires_at = now() - interval '1 second' WHERE user_id = $1", [
      user.userId,
    ]);
    expectEnvelope(await accept(user.token, expired.body.invite_token), 404);
    const withdrawn = await invite(server.url, owner.token, user.email);
    expect((await deleteMember(owner.token, user.userId)).status).toBe(204);
    expectEnvelope(await accept(user.token, withdrawn.body.invite_token), 404);
    expect((await team(owner.token)).body.members).toHaveLength(1);
  });

  test("when the user's team has data, then 409 says so and nothing changes", async () => {
    const owner = await createTestUser(server.url);
    const user = await createTestUser(server.url);
    const stream = await http(server.url, "POST", "/v1/streams", { token: user.token, body: { name: "mine" } });
    expect(stream.status).toBe(201);
    const invited = await invite(server.url, owner.token, user.email);
    const before = await snapshot(owner.teamId);
    const res = await accept(user.token, invited.body.invite_token);
    expectEnvelope(res, 409);
    expect(res.body.detail).toMatch(/has requests, batches, streams or payments/);
    expect(await snapshot(owner.teamId)).toEqual(before);
    expect((await me(user.token)).body.team_id).toBe(user.teamId);
  });

  test("when the user's team has other members, or the user is already in the team, then 409", async () => {
    const owner = await createTestUser(server.url);
    const other = await createTestUser(server.url);
    const colleague = await joinTeam(server.url, other);
    const invited = await invite(server.url, owner.token, colleague.email);
    const res = await accept(colleague.token, invited.body.invite_token);
    expectEnvelope(res, 409);
    expect(res.body.detail).toMatch(/other members/);
    const byOwner = await invite(server.url, owner.token, other.email);
    expectEnvelope(await accept(other.token, byOwner.body.invite_token), 409);

    // Already in the team: an invitation made before they joined by another path.
    const email = freshEmail();
    const first = await invite(server.url, owner.token, email);
    const admin = await joinTeam(server.url, owner, "admin");
    const elsewhere = await invite(server.url, admin.token, email);
    expect(elsewhere.status).toBe(201);
    const user = await createTestUser(server.url, { email });
    const joined = await accept(user.token, elsewhere.body.invite_token);
    expect(joined.status).toBe(200);
    expectEnvelope(await accept(joined.body.access_token, first.body.invite_token), 404);
  });
});

describe("PATCH /control/v1/teams/me/members/{user_id}", () => {
  test("when the owner changes a role, then it shows at once in the team and on the member's own reads", async () => {
    const owner = await createTestUser(server.url);
    const member = await joinTeam(server.url, owner);
    const key = await createTestApiKey(server.url, member.token);
    expect((await dataPlaneMe(key.key)).body.role).toBe("member");
    const res = await patchMember(owner.token, member.userId, { role: "admin", ignored: true });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      user_id: member.userId,
      email: member.email,
      role: "admin",
      is_active: true,
      created_at: expect.any(String),
    });
    expect((await me(member.token)).body.role).toBe("admin");
    expect((await dataPlaneMe(key.key)).body.role).toBe("admin");
    // Now an admin, the member may manage members.
    expect((await invite(server.url, member.token, freshEmail())).status).toBe(201);
  });

  test("when the last owner would be demoted, then 409; with a second owner, either may step down", async () => {
    const owner = await createTestUser(server.url);
    const res = await patchMember(owner.token, owner.userId, { role: "admin" });
    expectEnvelope(res, 409);
    expect(res.body.detail).toMatch(/last owner/);
    const second = await joinTeam(server.url, owner, "owner");
    expect((await patchMember(second.token, owner.userId, { role: "member" })).status).toBe(200);
    expectEnvelope(await patchMember(second.token, second.userId, { role: "admin" }), 409);
    expect((await me(owner.token)).body.role).toBe("member");
  });

  test("when an admin touches an owner or makes one, or a member changes roles, then 403 and nothing changes", async () => {
    const owner = await createTestUser(server.url);
    const admin = await joinTeam(server.url, owner, "admin");
    const member = await joinTeam(server.url, owner, "member");
    const before = await snapshot(owner.teamId);
    expectEnvelope(await patchMember(admin.token, owner.userId, { role: "member" }), 403);
    expectEnvelope(await patchMember(admin.token, member.userId, { role: "owner" }), 403);
    expectEnvelope(await invite(server.url, admin.token, freshEmail(), "owner"), 403);
    expectEnvelope(await patchMember(member.token, member.userId, { role: "admin" }), 403);
    expectEnvelope(await invite(server.url, member.token, freshEmail()), 403);
    expectEnvelope(await deleteMember(member.token, admin.userId), 403);
    expectEnvelope(await deleteMember(admin.token, owner.userId), 403);
    expect(await snapshot(owner.teamId)).toEqual(before);
    // An admin may change another admin and members.
    expect((await patchMember(admin.token, member.userId, { role: "admin" })).status).toBe(200);
  });

  test("when a pending invitation's role is changed, then the invitation carries it", async () => {
    const owner = await createTestUser(server.url);
    const email = freshEmail();
    const invited = await invite(server.url, owner.token, email);
    const res = await patchMember(owner.token, invited.body.user_id, { role: "admin" });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ role: "admin", is_active: false });
    const signup = await http(server.url, "POST", "/control/v1/auth/signup", {
      body: { email, password: "correct horse battery", invite_token: invited.body.invite_token },
    });
    expect(signup.body.user.role).toBe("admin");
  });

  test("when the input is bad, then 400 names the field and nothing changes", async () => {
    const owner = await createTestUser(server.url);
    const member = await joinTeam(server.url, owner);
    const before = await snapshot(owner.teamId);
    expectInvalid(await patchMember(owner.token, "not-a-uuid", { role: "admin" }), "user_id");
    expectInvalid(await patchMember(owner.token, member.userId, {}), "role");
    expectInvalid(await patchMember(owner.token, member.userId, { role: "king" }), "role");
    expectInvalid(await patchMember(owner.token, member.userId, { role: 3 }), "role");
    expectInvalid(await patchMember(owner.token, member.userId, { role: null }), "role");
    expect(await snapshot(owner.teamId)).toEqual(before);
  });

  test("when the user is of another team or unknown, then 404", async () => {
    const owner = await createTestUser(server.url);
    const other = await createTestUser(server.url);
    const theirs = await joinTeam(server.url, other);
    const before = await snapshot(other.teamId);
    expectEnvelope(await patchMember(owner.token, theirs.userId, { role: "admin" }), 404);
    expectEnvelope(await patchMember(owner.token, other.userId, { role: "member" }), 404);
    expectEnvelope(await patchMember(owner.token, "00000000-0000-4000-8000-000000000000", { role: "admin" }), 404);
    expectEnvelope(await deleteMember(owner.token, theirs.userId), 404);
    expect(await snapshot(other.teamId)).toEqual(before);
  });
});

describe("DELETE /control/v1/teams/me/members/{user_id}", () => {
  test("when a member is removed, then their keys for the team and their tokens stop working, and they can sign in to a team of their own", async () => {
    const owner = await createTestUser(server.url);
    const member = await joinTeam(server.url, owner);
    const keys = [await createTestApiKey(server.url, member.token), await createTestApiKey(server.url, member.token)];
    const ownerKey = await createTestApiKey(server.url, owner.token);
    for (const k of keys) expect((await dataPlaneMe(k.key)).status).toBe(200);

    const res = await deleteMember(owner.token, member.userId);
    expect(res.status).toBe(204);
    expect(res.text).toBe("");
    for (const k of keys) expectEnvelope(await dataPlaneMe(k.key), 401);
    expectEnvelope(await me(member.token), 401);
    expect((await dataPlaneMe(ownerKey.key)).status).toBe(200);
    const revoked = await server.db<{ revoked_at: Date | null }>("SELECT revoked_at FROM api_keys WHERE user_id = $1", [
      member.userId,
    ]);
    expect(revoked.every((k) => k.revoked_at !== null)).toBe(true);
    expect((await team(owner.token)).body.members.map((m: { user_id: string }) => m.user_id)).toEqual([owner.userId]);

    const login = await http(server.url, "POST", "/control/v1/auth/login", {
      body: { username: member.email, password: member.password },
    });
    expect(login.status).toBe(200);
    expect(login.body.user).toMatchObject({ role: "owner" });
    expect(login.body.user.team_id).not.toBe(owner.teamId);
    // Removed users can be invited back.
    const again = await invite(server.url, owner.token, member.email);
    expect((await accept(login.body.access_token, again.body.invite_token)).status).toBe(200);
  });

  test("when a key's user is in another team than the key (moved by any path, the key not revoked), then the key is refused", async () => {
    const owner = await createTestUser(server.url);
    const user = await createTestUser(server.url);
    const key = await createTestApiKey(server.url, user.token);
    // Moved by SQL, so no revoke ran and no process has this key cached yet.
    await server.db("UPDATE users SET team_id = $1, role = 'member' WHERE id = $2", [owner.teamId, user.userId]);
    expectEnvelope(await dataPlaneMe(key.key), 401);
  });

  test("when the last owner would be removed, then 409; another owner may be removed", async () => {
    const owner = await createTestUser(server.url);
    expectEnvelope(await deleteMember(owner.token, owner.userId), 409);
    const second = await joinTeam(server.url, owner, "owner");
    expect((await deleteMember(owner.token, second.userId)).status).toBe(204);
    expect((await me(owner.token)).body.role).toBe("owner");
  });

  test("when the user id is not a uuid, then 400 and nothing changes", async () => {
    const owner = await createTestUser(server.url);
    const before = await snapshot(owner.teamId);
    expectInvalid(await deleteMember(owner.token, "nope"), "user_id");
    expect(await snapshot(owner.teamId)).toEqual(before);
  });
});

describe("GraphQL", () => {
  const gql = (token: string | undefined, query: string, variables?: Record<string, unknown>) =>
    http(server.url, "POST", "/graphql", { token, body: { query, variables } });

  test("when members are invited, joined, changed and removed over GraphQL, then each answers as REST does", async () => {
    const owner = await createTestUser(server.url);
    const email = freshEmail();
    const invited = await gql(
      owner.token,
      `mutation($email: String!) { inviteMember(input: { email: $email, role: "admin" }) { inviteToken member { userId email role isActive user { id } } } }`,
      { email },
    );
    expect(invited.body.errors).toBeUndefined();
    const { inviteToken, member } = invited.body.data.inviteMember;
    expect(member).toEqual({ userId: expect.any(String), email, role: "admin", isActive: false, user: null });
    const user = await createTestUser(server.url, { email });
    const accepted = await gql(
      user.token,
      `mutation($t: String!) { acceptInvitation(token: $t) { message accessToken user { id teamId role } } }`,
      { t: inviteToken },
    );
    expect(accepted.body.errors).toBeUndefined();
    expect(accepted.body.data.acceptInvitation).toMatchObject({
      message: "Invitation accepted.",
      user: { id: user.userId, teamId: owner.teamId, role: "admin" },
    });
    const read = await gql(owner.token, `{ team { id role members { userId role isActive user { email teamId } } } }`);
    expect(read.body.data.team).toEqual({
      id: owner.teamId,
      role: "owner",
      members: [
        { userId: owner.userId, role: "owner", isActive: true, user: { email: owner.email, teamId: owner.teamId } },
        { userId: user.userId, role: "admin", isActive: true, user: { email, teamId: owner.teamId } },
      ],
    });
    const changed = await gql(
      owner.token,
      `mutation($id: ID!) { updateMember(userId: $id, input: { role: "member" }) { userId role } }`,
      { id: user.userId },
    );
    expect(changed.body.data.updateMember).toEqual({ userId: user.userId, role: "member" });
    const lastOwner = await gql(
      owner.token,
      `mutation($id: ID!) { updateMember(userId: $id, input: { role: "member" }) { userId } }`,
      { id: owner.userId },
    );
    expect(lastOwner.body.errors[0].extensions.status_code).toBe(409);
    const bad = await gql(owner.token, `mutation { inviteMember(input: { email: "nope" }) { inviteToken } }`);
    expect(bad.body.errors[0].extensions).toMatchObject({ status_code: 400, extra: [{ field: "email" }] });
    const removed = await gql(owner.token, `mutation($id: ID!) { removeMember(userId: $id) }`, { id: user.userId });
    expect(removed.body.data.removeMember).toBe(true);
    // A pending invitation of a registered user of another team does not show that user's account.
    const outsider = await createTestUser(server.url);
    await invite(server.url, owner.token, outsider.email);
    const pending = await gql(owner.token, `{ team { members { userId isActive user { id } } } }`);
    expect(pending.body.data.team.members).toContainEqual({ userId: outsider.userId, isActive: false, user: null });
    const anonymous = await gql(undefined, `{ team { id } }`);
    expect(anonymous.body.errors[0].extensions.status_code).toBe(401);
  });

  test("when members, their users and keys' users are read together, then each relation is one query (DataLoader)", async () => {
    const owner = await createTestUser(server.url);
    const members = [
      await joinTeam(server.url, owner, "admin"),
      await joinTeam(server.url, owner),
      await joinTeam(server.url, owner),
    ];
    for (const m of members) await createTestApiKey(server.url, m.token);
    await createTestApiKey(server.url, owner.token);
    const stats = server.app.loaders.stats;
    const before = { ...stats };
    const res = await gql(
      owner.token,
      `{ team { members { userId user { id email } } } apiKeys { items { id user { id } } } }`,
    );
    expect(res.body.errors).toBeUndefined();
    expect(res.body.data.team.members).toHaveLength(4);
    for (const m of res.body.data.team.members) expect(m.user.id).toBe(m.userId);
    expect(res.body.data.apiKeys.items).toHaveLength(4);
    expect(stats.membersQueries - before.membersQueries).toBe(1);
    // Members' users and keys' users resolve at the same depth: one batch for all of them.
    expect(stats.userQueries - before.userQueries).toBe(1);
  });
});
