/**
 * Sign up (`signup` mutation: an account, its team and the signup credit — or, with an invitation
 * token, a place in the inviting team) and sign in (`login`).
 * Both answer an access token, kept for the tab (api.ts).
 */
import { GraphqlError, gql } from "../api.js";
import { field, h, notice } from "../dom.js";
import type { PageContext } from "../main.js";

const SIGNUP = `mutation ($input: SignupInput!) { signup(input: $input) { accessToken } }`;
const LOGIN = `mutation ($input: LoginInput!) { login(input: $input) { accessToken } }`;

function authForm(
  ctx: PageContext,
  title: string,
  withName: boolean,
  submit: (values: { email: string; password: string; name: string; invite: string }) => Promise<string>,
): void {
  const email = h("input", { type: "email", name: "email", autocomplete: "username", required: true });
  const password = h("input", {
    type: "password",
    name: "password",
    autocomplete: withName ? "new-password" : "current-password",
    required: true,
    minlength: 8,
    maxlength: 128,
  });
  const name = h("input", { type: "text", name: "name", autocomplete: "name", maxlength: 200 });
  // An invitation link carries its token (`/dashboard/signup?invite=…`); it can be pasted too.
  const invite = h("input", {
    type: "text",
    name: "invite",
    autocomplete: "off",
    maxlength: 512,
    value: new URLSearchParams(location.search).get("invite") ?? "",
  });
  const status = h("div", { class: "status-slot" });
  const button = h("button", { type: "submit" }, title);
  const form = h(
    "form",
    { class: "card narrow", novalidate: false },
    withName ? field("Name (optional)", name) : null,
    field("Email", email),
    field("Password", password, withName ? "8 to 128 characters" : undefined),
    withName
      ? field("Invitation token (optional)", invite, "Joins the team that invited this email instead of creating one.")
      : null,
    status,
    button,
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    button.disabled = true;
    status.replaceChildren();
    submit({
      email: email.value.trim(),
      password: password.value,
      name: name.value.trim(),
      invite: invite.value.trim(),
    })
      .then((accessToken) => ctx.signedIn(accessToken))
      .catch((err: unknown) => {
        status.append(notice("error", err instanceof GraphqlError ? err.message : "Something went wrong"));
        button.disabled = false;
      });
  });
  const other = withName
    ? h("p", {}, "Have an account? ", h("a", { href: "/dashboard/signin" }, "Sign in"))
    : h("p", {}, "New here? ", h("a", { href: "/dashboard/signup" }, "Create an account"));
  ctx.main.append(h("h1", { tabindex: -1 }, title), form, other);
}

export function signUpPage(ctx: PageContext): void {
  authForm(ctx, "Sign up", true, async ({ email, password, name, invite }) => {
    const input: Record<string, string> = { email, password };
    if (name) input.name = name;
    if (invite) input.inviteToken = invite;
    return (await gql<{ signup: { accessToken: string } }>(SIGNUP, { input })).signup.accessToken;
  });
}

export function signInPage(ctx: PageContext): void {
  authForm(ctx, "Sign in", false, async ({ email, password }) => {
    return (await gql<{ login: { accessToken: string } }>(LOGIN, { input: { email, password } })).login.accessToken;
  });
}
