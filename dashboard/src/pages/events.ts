/**
 * Live completion events: the 20 newest from the `completionEvents` query, then every new one as
 * the `completionEvents` subscription (graphql-ws) delivers it, newest on top, marked "live".
 * The connection state is shown beside the list; new events are announced politely to screen
 * readers. Leaving the page ends the subscription.
 */
import { onSocketState, subscribe, type SocketState } from "../api.js";
import { gql } from "../api.js";
import { badge, count, fill, h, notice, table, usd, when } from "../dom.js";
import type { Cleanup, PageContext } from "../main.js";

interface CompletionEvent {
  completionId: string;
  responseId: string;
  model: string;
  status: string;
  promptTokens: number;
  completionTokens: number;
  totalTokens: number;
  costMicros: number;
  completedAt: string;
  customId: string | null;
  batchId: string | null;
  streamId: string | null;
}

const FIELDS = `completionId responseId model status promptTokens completionTokens totalTokens costMicros completedAt customId batchId streamId`;
const RECENT = `{ completionEvents(limit: 20) { data { ${FIELDS} } } }`;
const LIVE = `subscription { completionEvents { ${FIELDS} } }`;
/** Rows kept on the page. */
const MAX_ROWS = 200;

const STATE_TEXT: Record<SocketState, string> = {
  connecting: "Connecting…",
  connected: "Live: connected",
  closed: "Disconnected",
};

export async function eventsPage(ctx: PageContext): Promise<Cleanup> {
  const state = h("p", { class: "live-state", "data-state": "connecting", role: "status" }, STATE_TEXT.connecting);
  const announcer = h("p", { class: "visually-hidden", "aria-live": "polite" });
  const errorSlot = h("div");
  const body = h("tbody");
  const seen = new Set<string>();
  const tableEl = table(
    "Completion events, newest first",
    ["Completed", "Model", "Status", "Tokens (in / out)", "Cost", "Request", ""],
    [],
    "No events yet: run a request with an API key of this team.",
  );
  tableEl.querySelector("tbody")!.replaceWith(body);
  let emptyRow: HTMLTableRowElement | null = h(
    "tr",
    {},
    h("td", { colspan: 7, class: "empty" }, "No events yet: run a request with an API key of this team."),
  );
  body.append(emptyRow);

  function rowOf(e: CompletionEvent, live: boolean): HTMLTableRowElement {
    const tr = h(
      "tr",
      { class: live ? "fresh" : "" },
      h("td", {}, when(e.completedAt)),
      h("td", {}, e.model),
      h("td", {}, badge(e.status)),
      h("td", {}, `${count(e.promptTokens)} / ${count(e.completionTokens)}`),
      h("td", {}, usd(e.costMicros)),
      h(
        "td",
        {},
        h(
          "a",
          { href: `/dashboard/activity/${encodeURIComponent(e.responseId)}` },
          h("code", {}, e.responseId.slice(0, 13) + "…"),
        ),
      ),
      h("td", {}, live ? h("span", { class: "badge s-live" }, "live") : ""),
    );
    tr.dataset.responseId = e.responseId;
    return tr;
  }

  function add(e: CompletionEvent, live: boolean, atTop: boolean): void {
    if (seen.has(e.completionId)) return;
    seen.add(e.completionId);
    emptyRow?.remove();
    emptyRow = null;
    const tr = rowOf(e, live);
    if (atTop) body.prepend(tr);
    else body.append(tr);
    while (body.rows.length > MAX_ROWS) body.lastElementChild?.remove();
    if (live) announcer.textContent = `New event: ${e.model} ${e.status}, ${e.totalTokens} tokens`;
  }

  ctx.main.append(
    h("h1", { tabindex: -1 }, "Live events"),
    h("p", { class: "muted" }, "Every finished request of the team, as it is recorded."),
    state,
    announcer,
    errorSlot,
    tableEl,
  );

  const stopState = onSocketState((s) => {
    state.dataset.state = s;
    state.textContent = STATE_TEXT[s];
  });
  // Subscribe first, then read the recent ones: an event between the two is not lost (duplicates
  // are dropped by completion id).
  const stop = subscribe<{ completionEvents: CompletionEvent }>(
    LIVE,
    {},
    (data) => add(data.completionEvents, true, true),
    (message) => fill(errorSlot, notice("error", message)),
  );
  try {
    const { completionEvents } = await gql<{ completionEvents: { data: CompletionEvent[] } }>(RECENT);
    for (const e of completionEvents.data) add(e, false, false);
  } catch (err) {
    fill(errorSlot, notice("error", err instanceof Error ? err.message : "Could not load the events"));
  }
  return () => {
    stop();
    stopState();
  };
}
