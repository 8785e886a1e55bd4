/**
 * The dashboard shell: a History-API router under `/dashboard/` (the service answers every path
 * there with index.html), the signed-in navigation, and the page lifecycle — each page renders
 * into `<main>` and may return a cleanup (e.g. ending its subscription) run when it is left.
 * On each navigation the page's `<h1>` takes the focus, so keyboard and screen-reader users land
 * on the new content.
 */
import "./styles.css";
import { gql, setToken, setUnauthenticatedHandler, token } from "./api.js";
import { fill, h } from "./dom.js";
import { activityDetailPage, activityPage } from "./pages/activity.js";
import { signInPage, signUpPage } from "./pages/auth.js";
import { batchesPage } from "./pages/batches.js";
import { billingPage } from "./pages/billing.js";
import { eventsPage } from "./pages/events.js";
import { keysPage } from "./pages/keys.js";
import { teamPage } from "./pages/team.js";
import { usagePage } from "./pages/usage.js";
import { webhooksPage } from "./pages/webhooks.js";

export const BASE = "/dashboard/";

/** What a page gets: where to render, the route's parameter, and the signed-in user. */
export interface PageContext {
  main: HTMLElement;
  param?: string;
  me?: Me;
  navigate(path: string): void;
  /** Called by the sign-in and sign-up pages with a fresh access token. */
  signedIn(accessToken: string): void;
}
export type Cleanup = (() => void) | void;
type Page = (ctx: PageContext) => Promise<Cleanup> | Cleanup;

export interface Me {
  id: string;
  email: string;
  name: string;
  role: string;
  teamId: string;
}

interface Route {
  path: string;
  title: string;
  page: Page;
  /** Shown in the navigation (signed in). */
  nav?: boolean;
  public?: boolean;
}

const ROUTES: Route[] = [
  { path: "signin", title: "Sign in", page: signInPage, public: true },
  { path: "signup", title: "Sign up", page: signUpPage, public: true },
  { path: "usage", title: "Usage", page: usagePage, nav: true },
  { path: "keys", title: "API keys", page: keysPage, nav: true },
  { path: "billing", title: "Credit", page: billingPage, nav: true },
  { path: "activity", title: "Activity", page: activityPage, nav: true },
  { path: "activity/:id", title: "Activity record", page: activityDetailPage },
  { path: "events", title: "Live events", page: eventsPage, nav: true },
  { path: "batches", title: "Batches", page: batchesPage, nav: true },
  { path: "webhooks", title: "Webhooks", page: webhooksPage, nav: true },
  { path: "team", title: "Team", page: teamPage, nav: true },
];

const header = document.getElementById("top") as HTMLElement;
const main = document.getElementById("main") as HTMLElement;
let cleanup: Cleanup;
let me: Me | undefined;

function match(rest: string): { route: Route; param?: string } | undefined {
  for (const route of ROUTES) {
    if (route.path === rest) return { route };
    const [prefix, param] = route.path.split("/:");
    if (param && rest.startsWith(`${prefix}/`) && !rest.slice(prefix.length + 1).includes("/")) {
      return { route, param: decodeURIComponent(rest.slice(prefix.length + 1)) };
    }
  }
  return undefined;
}

export function navigate(path: string, replace = false): void {
  const url = BASE + path.replace(/^\/+/, "");
  if (replace) history.replaceState(null, "", url);
  else history.pushState(null, "", url);
  void render();
}

async function loadMe(): Promise<Me | undefined> {
  if (!token()) return undefined;
  try {
    return (await gql<{ me: Me }>("{ me { id email name role teamId } }")).me;
  } catch {
    return undefined;
  }
}

function renderHeader(current: string): void {
  const brand = h("a", { href: BASE + (me ? "usage" : "signin"), class: "brand" }, "Switchyard");
  if (!me) {
    fill(header, h("div", { class: "bar" }, brand));
    return;
  }
  const links = ROUTES.filter((r) => r.nav).map((r) =>
    h(
      "li",
      {},
      h("a", { href: BASE + r.path, "aria-current": current.split("/")[0] === r.path ? "page" : false }, r.title),
    ),
  );
  const signOut = h("button", { type: "button", class: "link", onclick: () => signOutNow() }, "Sign out");
  fill(
    header,
    h("div", { class: "bar" }, brand, h("span", { class: "who" }, `${me.email} · ${me.role}`), signOut),
    h("nav", { "aria-label": "Dashboard" }, h("ul", {}, ...links)),
  );
}

function signOutNow(): void {
  setToken(null);
  me = undefined;
  navigate("signin");
}

let rendering = 0;
async function render(): Promise<void> {
  const mine = ++rendering;
  if (typeof cleanup === "function") cleanup();
  cleanup = undefined;
  const rest = location.pathname.startsWith(BASE) ? location.pathname.slice(BASE.length).replace(/\/+$/, "") : "";
  if (token() && !me) me = await loadMe();
  if (!me && token()) setToken(null);
  if (mine !== rendering) return;
  const found = match(rest);
  if (!found) return navigate(me ? "usage" : "signin", true);
  if (!found.route.public && !me) return navigate("signin", true);
  if (found.route.public && me) return navigate("usage", true);
  renderHeader(rest);
  document.title = `${found.route.title} · Switchyard`;
  fill(main);
  // Pages put their heading in first and then load their data: the focus moves there at once.
  const pending = found.route.page({ main, param: found.param, me, navigate, signedIn });
  main.querySelector("h1")?.focus();
  const result = await pending;
  if (mine !== rendering) {
    if (typeof result === "function") result();
    return;
  }
  cleanup = result;
}

function signedIn(accessToken: string): void {
  setToken(accessToken);
  me = undefined;
  navigate("usage");
}

setUnauthenticatedHandler(() => {
  setToken(null);
  me = undefined;
  navigate("signin", true);
});

// Same-origin links under /dashboard/ change the page without a reload.
document.addEventListener("click", (event) => {
  const link = (event.target as Element | null)?.closest?.("a");
  if (!link || event.defaultPrevented || event.button !== 0) return;
  if (event.metaKey || event.ctrlKey || event.shiftKey || event.altKey || link.target) return;
  if (link.getAttribute("href")?.startsWith("#") || link.hasAttribute("download")) return;
  const url = new URL(link.href, location.href);
  if (url.origin !== location.origin || !url.pathname.startsWith(BASE)) return;
  event.preventDefault();
  navigate(url.pathname.slice(BASE.length) + url.search);
});
window.addEventListener("popstate", () => void render());
void render();
