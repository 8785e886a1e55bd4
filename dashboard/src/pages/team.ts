/**
 * Team: the members and pending invitations (`team.members`; one without a user is an
 * invitation), and for owners and admins: invite (`inviteMember` — the token is shown this once
 * and mailed), change a role (`updateMember`), remove a member or withdraw an invitation
 * (`removeMember`). The service enforces who may do what; the page only hides what cannot work.
 */
import { GraphqlError, gql } from "../api.js";
import { badge, field, fill, h, notice, row, select, table, when } from "../dom.js";
import type { PageContext } from "../main.js";

interface Member {
  userId: string;
  email: string;
  role: string;
  isActive: boolean;
  createdAt: string;
  user: { name: string } | null;
}

const TEAM = `{ team { id name role members { userId email role isActive createdAt user { name } } } }`;
const INVITE = `mutation ($input: InviteMemberInput!) { inviteMember(input: $input) { inviteToken member { email role } } }`;
const UPDATE = `mutation ($userId: ID!, $input: UpdateMemberInput!) { updateMember(userId: $userId, input: $input) { userId role } }`;
const REMOVE = `mutation ($userId: ID!) { removeMember(userId: $userId) }`;
const ACCEPT = `mutation ($token: String!) { acceptInvitation(token: $token) { accessToken } }`;
const ROLES: Array<[string, string]> = [
  ["member", "member"],
  ["admin", "admin"],
  ["owner", "owner"],
];

export async function teamPage(ctx: PageContext): Promise<void> {
  const heading = h("h1", { tabindex: -1 }, "Team");
  const status = h("div", { class: "status-slot", "aria-live": "polite" });
  const membersSlot = h("div");
  const invitesSlot = h("div");
  const inviteSlot = h("div");
  ctx.main.append(
    heading,
    status,
    inviteSlot,
    h("h2", {}, "Members"),
    membersSlot,
    h("h2", {}, "Invitations"),
    invitesSlot,
  );

  const report = (err: unknown, fallback: string) =>
    fill(status, notice("error", err instanceof GraphqlError ? err.message : fallback));

  async function remove(m: Member, what: string): Promise<void> {
    if (!confirm(`${what} ${m.email}?`)) return;
    try {
      await gql(REMOVE, { userId: m.userId });
      fill(status, notice("ok", `${what}: ${m.email} — done.`));
    } catch (err) {
      report(err, "Could not remove");
    }
    await load();
  }

  async function load(): Promise<void> {
    let team: { name: string; role: string; members: Member[] };
    try {
      team = (await gql<{ team: { name: string; role: string; members: Member[] } }>(TEAM)).team;
    } catch (err) {
      report(err, "Could not load the team");
      return;
    }
    heading.textContent = `Team ${team.name}`;
    const manager = team.role === "owner" || team.role === "admin";
    const members = team.members.filter((m) => m.user !== null);
    const invitations = team.members.filter((m) => m.user === null);
    const memberRows = members.map((m) => {
      const self = m.userId === ctx.me?.id;
      let roleCell: Node = badge(m.role);
      if (manager && !self) {
        const role = select("role", ROLES, m.role);
        role.setAttribute("aria-label", `Role of ${m.email}`);
        const save = h("button", { type: "button", class: "small" }, "Save");
        save.addEventListener("click", () => {
          gql(UPDATE, { userId: m.userId, input: { role: role.value } })
            .then(() => fill(status, notice("ok", `${m.email} is now ${role.value}.`)))
            .catch((err: unknown) => report(err, "Could not change the role"))
            .finally(() => void load());
        });
        roleCell = h("span", { class: "role-edit" }, role, save);
      }
      return row(
        m.user?.name || "",
        m.email + (self ? " (you)" : ""),
        roleCell,
        m.isActive ? "active" : "deactivated",
        when(m.createdAt),
        manager && !self
          ? h("button", { type: "button", class: "danger small", onclick: () => void remove(m, "Remove") }, "Remove")
          : null,
      );
    });
    fill(membersSlot, table("Members", ["Name", "Email", "Role", "State", "Joined", ""], memberRows, "No members."));
    const inviteRows = invitations.map((m) =>
      row(
        m.email,
        m.role,
        when(m.createdAt),
        manager
          ? h(
              "button",
              { type: "button", class: "danger small", onclick: () => void remove(m, "Withdraw the invitation of") },
              "Withdraw",
            )
          : null,
      ),
    );
    fill(
      invitesSlot,
      table("Pending invitations", ["Email", "Role", "Invited", ""], inviteRows, "No pending invitations."),
    );
    if (manager && !inviteSlot.firstChild) inviteSlot.append(inviteForm());
  }

  function inviteForm(): HTMLElement {
    const email = h("input", { type: "email", name: "email", required: true, autocomplete: "off" });
    const role = select("role", ROLES, "member");
    const button = h("button", { type: "submit" }, "Invite");
    const shown = h("div", { "aria-live": "polite" });
    const form = h(
      "form",
      { class: "card inline-form", "aria-labelledby": "invite-title" },
      h("h2", { id: "invite-title" }, "Invite someone"),
      field("Email", email),
      field("Role", role),
      button,
    );
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      button.disabled = true;
      gql<{ inviteMember: { inviteToken: string; member: { email: string } } }>(INVITE, {
        input: { email: email.value.trim(), role: role.value },
      })
        .then(async ({ inviteMember }) => {
          email.value = "";
          const token = h("input", { type: "text", readonly: true, value: inviteMember.inviteToken, class: "secret" });
          const link = new URL(
            `/dashboard/signup?invite=${encodeURIComponent(inviteMember.inviteToken)}`,
            location.href,
          );
          fill(
            shown,
            h(
              "div",
              { class: "card shown-once", role: "status" },
              h("p", {}, `Invitation mailed to ${inviteMember.member.email}. Its token, shown this once:`),
              field("Invitation token", token),
              h("p", {}, "A new user signs up with it here: ", h("code", { class: "wrap" }, link.toString())),
            ),
          );
          await load();
        })
        .catch((err: unknown) =>
          fill(shown, notice("error", err instanceof GraphqlError ? err.message : "Could not invite")),
        )
        .finally(() => {
          button.disabled = false;
        });
    });
    return h("div", {}, form, shown);
  }

  ctx.main.append(joinForm(ctx));
  await load();
}

/** Joins the team of an invitation made for the signed-in user's email (`acceptInvitation`). */
function joinForm(ctx: PageContext): HTMLElement {
  const token = h("input", { type: "text", name: "token", required: true, autocomplete: "off", maxlength: 512 });
  const button = h("button", { type: "submit" }, "Join team");
  const status = h("div", { class: "status-slot" });
  const form = h(
    "form",
    { class: "card inline-form spaced", "aria-labelledby": "join-title" },
    h("h2", { id: "join-title" }, "Join another team"),
    field("Your invitation token", token, "From an invitation sent to your email; you leave this team."),
    button,
    status,
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (!confirm("Join the inviting team? You leave this one.")) return;
    button.disabled = true;
    gql<{ acceptInvitation: { accessToken: string } }>(ACCEPT, { token: token.value.trim() })
      .then(({ acceptInvitation }) => ctx.signedIn(acceptInvitation.accessToken))
      .catch((err: unknown) => {
        fill(status, notice("error", err instanceof GraphqlError ? err.message : "Could not join"));
        button.disabled = false;
      });
  });
  return form;
}
