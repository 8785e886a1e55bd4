/**
 * Batches: the team's batches (`batches`, newest first, 20 a page with `after`) with their
 * progress (`requestCounts`: a progress bar of finished items over all), totals, and a cancel
 * button for unfinished ones (`cancelBatch`). While any batch is unfinished the list refreshes
 * every 5 s. Batches are created over REST (`POST /v1/batches` with a JSONL body).
 */
import { gql } from "../api.js";
import { badge, count, fill, h, notice, row, table, usd, when } from "../dom.js";
import type { Cleanup, PageContext } from "../main.js";

interface Batch {
  id: string;
  status: string;
  createdAt: string;
  completedAt: string | null;
  expiresAt: string;
  requestCount: number;
  requestCounts: {
    pending: number;
    running: number;
    completed: number;
    failed: number;
    cancelled: number;
    total: number;
  };
  totalTokens: number;
  totalCostMicros: number;
}

const LIST = `query ($after: ID) {
  batches(limit: 20, after: $after) {
    id status createdAt completedAt expiresAt requestCount totalTokens totalCostMicros
    requestCounts { pending running completed failed cancelled total }
  }
}`;
const CANCEL = `mutation ($id: ID!) { cancelBatch(id: $id) { id status } }`;
const TERMINAL = new Set(["completed", "failed", "cancelled"]);
const REFRESH_MS = 5_000;

function progress(b: Batch): HTMLElement {
  const c = b.requestCounts;
  const done = c.completed + c.failed + c.cancelled;
  const label = `${count(done)} of ${count(c.total)} finished (${count(c.completed)} completed, ${count(c.failed)} failed, ${count(c.cancelled)} cancelled, ${count(c.running)} running)`;
  return h(
    "div",
    { class: "progress" },
    h("progress", { max: Math.max(1, c.total), value: done, "aria-label": `Batch ${b.id}: ${label}` }),
    h("small", {}, label),
  );
}

export async function batchesPage(ctx: PageContext): Promise<Cleanup> {
  const listSlot = h("div", { "aria-live": "polite" });
  const status = h("div", { class: "status-slot" });
  const more = h("button", { type: "button", class: "small", hidden: true }, "Older batches");
  let batches: Batch[] = [];
  let timer: ReturnType<typeof setTimeout> | undefined;
  let left = false;

  async function cancel(b: Batch): Promise<void> {
    if (!confirm(`Cancel batch ${b.id}? Items not started will never run.`)) return;
    try {
      await gql(CANCEL, { id: b.id });
      fill(status, notice("ok", `Batch ${b.id} cancelled.`));
    } catch (err) {
      fill(status, notice("error", err instanceof Error ? err.message : "Could not cancel the batch"));
    }
    await load(false);
  }

  function render(): void {
    const rows = batches.map((b) =>
      row(
        h("code", {}, b.id),
        badge(b.status),
        progress(b),
        count(b.totalTokens),
        usd(b.totalCostMicros),
        when(b.createdAt),
        TERMINAL.has(b.status)
          ? h("small", { class: "muted" }, "Results: GET /v1/batches/{id}/results.jsonl with an API key")
          : h("button", { type: "button", class: "danger small", onclick: () => void cancel(b) }, "Cancel"),
      ),
    );
    fill(
      listSlot,
      table(
        "Batches",
        ["Batch", "Status", "Progress", "Tokens", "Cost", "Created", ""],
        rows,
        "No batches yet. Create one with POST /v1/batches (one JSON request per line).",
      ),
    );
  }

  async function load(append: boolean): Promise<void> {
    clearTimeout(timer);
    try {
      const after = append && batches.length ? batches[batches.length - 1].id : null;
      const { batches: page } = await gql<{ batches: Batch[] }>(LIST, { after });
      batches = append ? [...batches, ...page] : page;
      more.hidden = page.length < 20;
      render();
    } catch (err) {
      fill(listSlot, notice("error", err instanceof Error ? err.message : "Could not load the batches"));
    }
    if (!left && batches.some((b) => !TERMINAL.has(b.status))) timer = setTimeout(() => void load(false), REFRESH_MS);
  }

  more.addEventListener("click", () => void load(true));
  ctx.main.append(h("h1", { tabindex: -1 }, "Batches"), status, listSlot, more);
  await load(false);
  return () => {
    left = true;
    clearTimeout(timer);
  };
}
