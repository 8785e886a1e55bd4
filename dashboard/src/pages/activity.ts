/**
 * Activity: the team's requests (`activityRecords`; members see their own), newest first, filtered
 * by type, status, model (`activityModels`) and creation dates, 25 a page; the filters live in the
 * address (`?type=…&page=…`) so a filtered view can be bookmarked and the Back button works.
 * The detail view (`activityRecord`) shows one record with its request and answer bodies.
 */
import { gql } from "../api.js";
import { append, badge, count, field, fill, h, notice, row, select, table, usd, when } from "../dom.js";
import type { PageContext } from "../main.js";

interface Record_ {
  id: string;
  createdAt: string;
  completedAt: string | null;
  model: string;
  type: string;
  status: string;
  endpoint: string;
  promptTokens: number;
  completionTokens: number;
  totalTokens: number;
  cachedPromptTokens: number;
  costMicros: number;
  apiKeyName: string | null;
  apiKeyPrefix: string | null;
  customId: string | null;
  batchId: string | null;
  streamId: string | null;
  serviceTier: string;
}

const FIELDS = `id createdAt completedAt model type status endpoint promptTokens completionTokens totalTokens
  cachedPromptTokens costMicros apiKeyName apiKeyPrefix customId batchId streamId serviceTier`;
const LIST = `query ($type: String, $status: String, $model: String, $createdAfter: String, $createdBefore: String, $page: Int) {
  activityRecords(type: $type, status: $status, model: $model, createdAfter: $createdAfter,
                  createdBefore: $createdBefore, page: $page, pageSize: 25) {
    items { ${FIELDS} }
    page pageSize total
  }
  activityModels
}`;
const DETAIL = `query ($id: ID!) { activityRecord(id: $id) { ${FIELDS} userId bodyJson resultJson errorJson } }`;

const TYPES: Array<[string, string]> = [
  ["", "Any type"],
  ["standalone", "standalone"],
  ["batch", "batch"],
  ["stream", "stream"],
];
const STATUSES: Array<[string, string]> = [
  ["", "Any status"],
  ["pending", "pending"],
  ["running", "running"],
  ["completed", "completed"],
  ["failed", "failed"],
  ["cancelled", "cancelled"],
];

export async function activityPage(ctx: PageContext): Promise<void> {
  const params = new URLSearchParams(location.search);
  const page = Math.max(1, Number(params.get("page")) || 1);
  const type = select("type", TYPES, params.get("type") ?? "");
  const status = select("status", STATUSES, params.get("status") ?? "");
  const model = select("model", [["", "Any model"]], params.get("model") ?? "");
  const from = h("input", { type: "date", name: "from", value: params.get("from") ?? "" });
  const to = h("input", { type: "date", name: "to", value: params.get("to") ?? "" });
  const form = h(
    "form",
    { class: "card filters", role: "search", "aria-label": "Filter activity" },
    field("Type", type),
    field("Status", status),
    field("Model", model),
    field("From (UTC day)", from),
    field("To (UTC day)", to),
    h(
      "div",
      { class: "actions" },
      h("button", { type: "submit" }, "Apply"),
      h("a", { href: "/dashboard/activity", class: "button secondary" }, "Clear"),
    ),
  );
  const go = (p: number) => {
    const next = new URLSearchParams();
    for (const [k, v] of [
      ["type", type.value],
      ["status", status.value],
      ["model", model.value],
      ["from", from.value],
      ["to", to.value],
    ])
      if (v) next.set(k, v);
    if (p > 1) next.set("page", String(p));
    const qs = next.toString();
    ctx.navigate(`activity${qs ? `?${qs}` : ""}`);
  };
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    go(1);
  });
  const listSlot = h("div", { "aria-live": "polite" });
  const refresh = h("button", { type: "button", class: "small", onclick: () => void load() }, "Refresh");
  ctx.main.append(h("h1", { tabindex: -1 }, "Activity"), form, h("div", { class: "toolbar" }, refresh), listSlot);

  async function load(): Promise<void> {
    const variables: Record<string, unknown> = { page };
    if (type.value) variables.type = type.value;
    if (status.value) variables.status = status.value;
    if (model.value) variables.model = model.value;
    if (from.value) variables.createdAfter = `${from.value}T00:00:00Z`;
    if (to.value) variables.createdBefore = new Date(Date.parse(`${to.value}T00:00:00Z`) + 86_400_000).toISOString();
    try {
      const data = await gql<{
        activityRecords: { items: Record_[]; page: number; pageSize: number; total: number };
        activityModels: string[];
      }>(LIST, variables);
      const chosen = model.value;
      fill(model, h("option", { value: "" }, "Any model"));
      for (const m of data.activityModels) model.append(h("option", { value: m, selected: m === chosen }, m));
      const { items, total, pageSize } = data.activityRecords;
      const rows = items.map((r) => {
        const tr = row(
          h(
            "a",
            { href: `/dashboard/activity/${encodeURIComponent(r.id)}` },
            when(r.createdAt),
            h("span", { class: "visually-hidden" }, ` details of ${r.id}`),
          ),
          r.model,
          r.type,
          badge(r.status),
          r.endpoint,
          count(r.totalTokens),
          usd(r.costMicros),
          r.apiKeyName ? `${r.apiKeyName} (${r.apiKeyPrefix}…)` : "",
        );
        tr.dataset.activityId = r.id;
        return tr;
      });
      const pages = Math.max(1, Math.ceil(total / pageSize));
      fill(
        listSlot,
        h("p", { class: "muted" }, `${count(total)} record${total === 1 ? "" : "s"} · page ${page} of ${pages}`),
        table(
          "Activity records",
          ["Created", "Model", "Type", "Status", "Endpoint", "Tokens", "Cost", "Key"],
          rows,
          "No activity matches.",
        ),
        h(
          "nav",
          { class: "pager", "aria-label": "Pages" },
          h("button", { type: "button", class: "small", disabled: page <= 1, onclick: () => go(page - 1) }, "Newer"),
          h(
            "button",
            { type: "button", class: "small", disabled: page >= pages, onclick: () => go(page + 1) },
            "Older",
          ),
        ),
      );
    } catch (err) {
      fill(listSlot, notice("error", err instanceof Error ? err.message : "Could not load the activity"));
    }
  }
  await load();
}

function json(value: unknown): HTMLElement {
  if (value === null || value === undefined)
    return h("p", { class: "muted" }, "Not stored (zero data retention, or none).");
  return h("pre", { class: "json", tabindex: 0 }, JSON.stringify(value, null, 2));
}

export async function activityDetailPage(ctx: PageContext): Promise<void> {
  const back = h("p", {}, h("a", { href: "/dashboard/activity" }, "← All activity"));
  ctx.main.append(back, h("h1", { tabindex: -1 }, "Activity record"));
  try {
    const { activityRecord: r } = await gql<{
      activityRecord: Record_ & { userId: string | null; bodyJson: unknown; resultJson: unknown; errorJson: unknown };
    }>(DETAIL, { id: ctx.param });
    const facts: Array<[string, string | Node]> = [
      ["Id", h("code", {}, r.id)],
      ["Status", badge(r.status)],
      ["Model", r.model],
      ["Endpoint", r.endpoint],
      ["Type", r.type],
      ["Service tier", r.serviceTier],
      ["Created", when(r.createdAt)],
      ["Completed", when(r.completedAt) || "—"],
      ["Prompt tokens", count(r.promptTokens)],
      ["Cached prompt tokens", count(r.cachedPromptTokens)],
      ["Completion tokens", count(r.completionTokens)],
      ["Cost", usd(r.costMicros)],
      ["API key", r.apiKeyName ? `${r.apiKeyName} (${r.apiKeyPrefix}…)` : "—"],
      ["Custom id", r.customId ?? "—"],
      ["Batch", r.batchId ?? "—"],
      ["Stream", r.streamId ?? "—"],
    ];
    append(
      ctx.main,
      h("dl", { class: "facts" }, ...facts.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
      r.errorJson ? h("section", {}, h("h2", {}, "Error"), json(r.errorJson)) : null,
      h("section", {}, h("h2", {}, "Request"), json(r.bodyJson)),
      h("section", {}, h("h2", {}, "Answer"), json(r.resultJson)),
    );
  } catch (err) {
    ctx.main.append(notice("error", err instanceof Error ? err.message : "Could not load the record"));
  }
}
