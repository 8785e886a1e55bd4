/**
 * Credit: the team's balance and 30-day spend (`billingSummary`) and the ledger
 * (`billingTransactions`, newest first, paged with `nextStartingAfter`). Owners and admins only:
 * the service refuses members, and the page says so.
 */
import { gql } from "../api.js";
import { append, count, fill, h, notice, row, table, usd, when } from "../dom.js";
import type { PageContext } from "../main.js";

interface Transaction {
  id: string;
  type: string;
  amountMicros: number;
  balanceAfterMicros: number;
  description: string;
  createdAt: string;
}

const SUMMARY = `{ billingSummary(days: 30) { summary { creditBalanceMicros estimatedCostMicros totalRequests totalTokens } } }`;
const TRANSACTIONS = `query ($after: ID) {
  billingTransactions(limit: 25, startingAfter: $after) {
    items { id type amountMicros balanceAfterMicros description createdAt }
    nextStartingAfter
  }
}`;

export async function billingPage(ctx: PageContext): Promise<void> {
  const heading = h("h1", { tabindex: -1 }, "Credit");
  ctx.main.append(heading);
  if (ctx.me && ctx.me.role === "member") {
    ctx.main.append(notice("error", "Only owners and admins of the team see its credit and ledger."));
    return;
  }
  const summarySlot = h("div", { "aria-live": "polite" });
  const ledgerSlot = h("div");
  const more = h("button", { type: "button", class: "small", hidden: true }, "Older transactions");
  const refresh = h("button", { type: "button", class: "small" }, "Refresh");
  let rows: HTMLTableRowElement[] = [];
  let next: string | null = null;

  async function loadSummary(): Promise<void> {
    const { billingSummary } = await gql<{
      billingSummary: {
        summary: {
          creditBalanceMicros: number;
          estimatedCostMicros: number;
          totalRequests: number;
          totalTokens: number;
        };
      };
    }>(SUMMARY);
    const s = billingSummary.summary;
    fill(
      summarySlot,
      h(
        "dl",
        { class: "stats" },
        h("div", {}, h("dt", {}, "Balance"), h("dd", { "data-testid": "balance" }, usd(s.creditBalanceMicros))),
        h("div", {}, h("dt", {}, "Spent, last 30 days"), h("dd", {}, usd(s.estimatedCostMicros))),
        h("div", {}, h("dt", {}, "Requests, last 30 days"), h("dd", {}, count(s.totalRequests))),
        h("div", {}, h("dt", {}, "Tokens, last 30 days"), h("dd", {}, count(s.totalTokens))),
      ),
    );
  }

  async function loadLedger(after: string | null): Promise<void> {
    const { billingTransactions: page } = await gql<{
      billingTransactions: { items: Transaction[]; nextStartingAfter: string | null };
    }>(TRANSACTIONS, { after });
    const fresh = page.items.map((t) =>
      row(
        when(t.createdAt),
        t.type,
        h("span", { class: t.amountMicros < 0 ? "neg" : "pos" }, usd(t.amountMicros)),
        usd(t.balanceAfterMicros),
        t.description,
      ),
    );
    rows = after ? [...rows, ...fresh] : fresh;
    next = page.nextStartingAfter;
    more.hidden = next === null;
    fill(
      ledgerSlot,
      table(
        "Ledger transactions",
        ["When", "Type", "Amount", "Balance after", "Description"],
        rows,
        "No transactions.",
      ),
    );
  }

  async function loadAll(): Promise<void> {
    try {
      await Promise.all([loadSummary(), loadLedger(null)]);
    } catch (err) {
      fill(summarySlot, notice("error", err instanceof Error ? err.message : "Could not load the credit"));
    }
  }

  refresh.addEventListener("click", () => void loadAll());
  more.addEventListener("click", () => void loadLedger(next).catch(() => undefined));
  append(ctx.main, h("div", { class: "toolbar" }, refresh), summarySlot, h("h2", {}, "Ledger"), ledgerSlot, more);
  await loadAll();
}
