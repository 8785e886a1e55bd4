/**
 * Usage: totals over a window (`usageSummary`) and a chart by UTC day and model (`usageDaily`,
 * drawn with uPlot: one series per model, of requests, tokens or cost). The same numbers are in a
 * table under the chart, for screen readers and for copying.
 */
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import { gql } from "../api.js";
import { count, field, fill, h, notice, row, select, table, usd } from "../dom.js";
import type { Cleanup, PageContext } from "../main.js";

interface DailyItem {
  date: string;
  model: string;
  requestCount: number;
  totalTokens: number;
  costMicros: number;
}

interface Totals {
  totalRequests: number;
  totalTokens: number;
  totalCostMicros: number;
}

const QUERY = `query ($days: Int) {
  usageDaily(days: $days) { date model requestCount totalTokens costMicros }
  usageSummary(days: $days) { summary { totalRequests totalTokens totalCostMicros } }
}`;

type Metric = "requestCount" | "totalTokens" | "costMicros";
const METRICS: Array<[Metric, string]> = [
  ["requestCount", "Requests"],
  ["totalTokens", "Tokens"],
  ["costMicros", "Cost (USD)"],
];
const COLORS = ["#2563eb", "#d97706", "#059669", "#db2777", "#7c3aed", "#0891b2", "#65a30d", "#dc2626"];

/** Every UTC day of the window, oldest first, as `YYYY-MM-DD`. */
function daysOf(window: number): string[] {
  const out: string[] = [];
  const today = Date.UTC(new Date().getUTCFullYear(), new Date().getUTCMonth(), new Date().getUTCDate());
  for (let i = window - 1; i >= 0; i--) out.push(new Date(today - i * 86_400_000).toISOString().slice(0, 10));
  return out;
}

export async function usagePage(ctx: PageContext): Promise<Cleanup> {
  const days = select(
    "days",
    [
      ["7", "7 days"],
      ["30", "30 days"],
      ["90", "90 days"],
    ],
    "30",
  );
  const metric = select("metric", METRICS, "requestCount");
  const totalsSlot = h("div", { "aria-live": "polite" });
  const chartSlot = h("figure", { class: "chart", "aria-label": "Usage by day and model" });
  const tableSlot = h("div");
  let plot: uPlot | undefined;
  let items: DailyItem[] = [];
  let windowDays = 30;

  function draw(): void {
    plot?.destroy();
    plot = undefined;
    const key = metric.value as Metric;
    const dayList = daysOf(windowDays);
    const models = [...new Set(items.map((i) => i.model))].sort();
    const x = dayList.map((d) => Date.parse(`${d}T00:00:00Z`) / 1000);
    const series = models.map((model) =>
      dayList.map((d) => {
        const item = items.find((i) => i.date === d && i.model === model);
        const v = item ? item[key] : 0;
        return key === "costMicros" ? v / 1e6 : v;
      }),
    );
    const caption = h("figcaption", {}, `${METRICS.find(([k]) => k === key)![1]} per UTC day and model`);
    fill(chartSlot, caption);
    if (models.length === 0) {
      chartSlot.append(h("p", { class: "empty" }, "No usage in this window yet."));
      return;
    }
    const width = Math.max(280, Math.min(chartSlot.clientWidth || 900, 1200) - 8);
    const opts: uPlot.Options = {
      width,
      height: width < 500 ? 220 : 300,
      scales: { x: { time: true } },
      axes: [{}, { values: (_u, ticks) => ticks.map((t) => (key === "costMicros" ? `$${t}` : count(t))) }],
      series: [
        { label: "Day", value: (_u, v) => (v == null ? "" : new Date(v * 1000).toISOString().slice(0, 10)) },
        ...models.map((model, i) => ({
          label: model,
          stroke: COLORS[i % COLORS.length],
          width: 2,
          points: { show: true },
        })),
      ],
    };
    plot = new uPlot(opts, [x, ...series], chartSlot);
  }

  function renderTable(): void {
    const rows = [...items]
      .sort((a, b) => b.date.localeCompare(a.date) || a.model.localeCompare(b.model))
      .map((i) => row(i.date, i.model, count(i.requestCount), count(i.totalTokens), usd(i.costMicros)));
    fill(
      tableSlot,
      table("Usage by day and model", ["Day (UTC)", "Model", "Requests", "Tokens", "Cost"], rows, "No usage."),
    );
  }

  async function load(): Promise<void> {
    windowDays = Number(days.value);
    try {
      const data = await gql<{ usageDaily: DailyItem[]; usageSummary: { summary: Totals } }>(QUERY, {
        days: windowDays,
      });
      items = data.usageDaily;
      const t = data.usageSummary.summary;
      fill(
        totalsSlot,
        h(
          "dl",
          { class: "stats" },
          h("div", {}, h("dt", {}, "Requests"), h("dd", {}, count(t.totalRequests))),
          h("div", {}, h("dt", {}, "Tokens"), h("dd", {}, count(t.totalTokens))),
          h("div", {}, h("dt", {}, "Cost"), h("dd", {}, usd(t.totalCostMicros))),
        ),
      );
      draw();
      renderTable();
    } catch (err) {
      fill(totalsSlot, notice("error", err instanceof Error ? err.message : "Could not load the usage"));
    }
  }

  days.addEventListener("change", () => void load());
  metric.addEventListener("change", () => draw());
  let resizeTimer: ReturnType<typeof setTimeout> | undefined;
  const onResize = () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(draw, 150);
  };
  window.addEventListener("resize", onResize);

  ctx.main.append(
    h("h1", { tabindex: -1 }, "Usage"),
    h("div", { class: "toolbar" }, field("Window", days), field("Show", metric)),
    totalsSlot,
    chartSlot,
    h("h2", {}, "By day and model"),
    tableSlot,
  );
  await load();
  return () => {
    window.removeEventListener("resize", onResize);
    clearTimeout(resizeTimer);
    plot?.destroy();
  };
}
