/**
 * Webhooks (issue 27, item 6): the team's completion-webhook deliveries (`webhookDeliveries`,
 * newest first, 20 a page with `startingAfter`), each with its status and every attempt — when,
 * the receiver's HTTP status or the error (a refused private address says which setting allows
 * it) and how long it took — filtered by status. A failed delivery that is still kept has a
 * Redeliver button (`redeliverWebhook`; owners and admins). While any delivery is pending the
 * list refreshes every 5 s.
 */
import { gql } from "../api.js";
import { badge, count, fill, field, h, notice, row, select, table, when } from "../dom.js";
import type { Cleanup, PageContext } from "../main.js";

interface Attempt {
  attempt: number;
  at: string;
  statusCode: number | null;
  error: string | null;
  latencyMs: number;
}

interface Delivery {
  id: string;
  responseId: string;
  url: string;
  status: string;
  createdAt: string;
  redeliverable: boolean;
  redeliverableUntil: string | null;
  attempts: Attempt[];
}

const PAGE = 20;
const FIELDS = `id responseId url status createdAt redeliverable redeliverableUntil
  attempts { attempt at statusCode error latencyMs }`;
const LIST = `query ($after: ID, $status: String) {
  webhookDeliveries(limit: ${PAGE}, startingAfter: $after, status: $status) { items { ${FIELDS} } nextStartingAfter }
}`;
const REDELIVER = `mutation ($id: ID!) { redeliverWebhook(id: $id) { id status } }`;
const STATUSES: Array<[string, string]> = [
  ["", "Any status"],
  ["pending", "pending"],
  ["delivered", "delivered"],
  ["failed", "failed"],
];
const REFRESH_MS = 5_000;

/** Each attempt on a line: `#2 · time · HTTP 500 · 12 ms`, or the error when no status came. */
function attemptsList(d: Delivery): HTMLElement {
  if (d.attempts.length === 0) return h("small", { class: "muted" }, "not tried yet");
  return h(
    "ol",
    { class: "attempts", "aria-label": `Attempts of delivery ${d.id}` },
    ...d.attempts.map((a) => {
      const outcome = a.statusCode !== null ? `HTTP ${a.statusCode}` : (a.error ?? "no answer");
      const detail = a.statusCode !== null && a.error && a.error !== `HTTP ${a.statusCode}` ? ` (${a.error})` : "";
      return h(
        "li",
        { value: a.attempt, "data-attempt": a.attempt },
        `${when(a.at)} · `,
        h("span", { class: a.statusCode !== null && a.statusCode < 300 ? "ok" : "error" }, outcome + detail),
        ` · ${count(a.latencyMs)} ms`,
      );
    }),
  );
}

export async function webhooksPage(ctx: PageContext): Promise<Cleanup> {
  const managers = ctx.me?.role === "owner" || ctx.me?.role === "admin";
  const status = select("status", STATUSES, new URLSearchParams(location.search).get("status") ?? "");
  const listSlot = h("div", { "aria-live": "polite" });
  const message = h("div", { class: "status-slot" });
  const more = h("button", { type: "button", class: "small", hidden: true }, "Older deliveries");
  const refresh = h("button", { type: "button", class: "small" }, "Refresh");
  let deliveries: Delivery[] = [];
  let next: string | null = null;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let left = false;

  async function redeliver(d: Delivery): Promise<void> {
    try {
      await gql(REDELIVER, { id: d.id });
      fill(message, notice("ok", `Delivery ${d.id} is pending again: it will be sent shortly.`));
    } catch (err) {
      fill(message, notice("error", err instanceof Error ? err.message : "Could not redeliver"));
    }
    await load(false);
  }

  function actionOf(d: Delivery): HTMLElement | null {
    if (!d.redeliverable) return null;
    if (!managers) return h("small", { class: "muted" }, "Owners and admins can redeliver");
    return h(
      "button",
      {
        type: "button",
        class: "small",
        "aria-label": `Redeliver ${d.id}`,
        title: d.redeliverableUntil ? `Redeliverable until ${when(d.redeliverableUntil)}` : undefined,
        onclick: () => void redeliver(d),
      },
      "Redeliver",
    );
  }

  function render(): void {
    const rows = deliveries.map((d) => {
      const target = h(
        "div",
        { class: "delivery-target" },
        h("code", {}, d.responseId),
        h("small", {}, h("code", { class: "wrap" }, d.url)),
        h("small", { class: "muted" }, `created ${when(d.createdAt)}`),
      );
      const tr = row(target, badge(d.status), attemptsList(d), actionOf(d));
      tr.dataset.deliveryId = d.id;
      return tr;
    });
    fill(
      listSlot,
      table(
        "Webhook deliveries",
        ["Request and URL", "Status", "Attempts", ""],
        rows,
        "No webhook deliveries. A request whose metadata names a completion_webhook URL gets one when it ends.",
      ),
    );
  }

  async function load(append: boolean): Promise<void> {
    clearTimeout(timer);
    try {
      const { webhookDeliveries: page } = await gql<{
        webhookDeliveries: { items: Delivery[]; nextStartingAfter: string | null };
      }>(LIST, { after: append ? next : null, status: status.value || null });
      deliveries = append ? [...deliveries, ...page.items] : page.items;
      next = page.nextStartingAfter;
      more.hidden = next === null;
      render();
    } catch (err) {
      fill(listSlot, notice("error", err instanceof Error ? err.message : "Could not load the deliveries"));
    }
    if (!left && deliveries.some((d) => d.status === "pending")) timer = setTimeout(() => void load(false), REFRESH_MS);
  }

  status.addEventListener("change", () => {
    const qs = status.value ? `?status=${encodeURIComponent(status.value)}` : "";
    history.replaceState(null, "", `${location.pathname}${qs}`);
    void load(false);
  });
  refresh.addEventListener("click", () => void load(false));
  more.addEventListener("click", () => void load(true));
  ctx.main.append(
    h("h1", { tabindex: -1 }, "Webhooks"),
    h(
      "p",
      { class: "muted" },
      "Completion webhooks of the team's requests (metadata.completion_webhook) and every attempt to send them.",
    ),
    h("div", { class: "toolbar" }, field("Status", status), h("div", { class: "field" }, refresh)),
    message,
    listSlot,
    more,
  );
  await load(false);
  return () => {
    left = true;
    clearTimeout(timer);
  };
}
