/**
 * The lean counters and histograms (issue 30, item 3) render exactly what prom-client's `Counter`
 * and `Histogram` render for the same observations: `/metrics` must not change when the metrics
 * every request touches move to them.
 */
import { Counter, Histogram, Registry } from "prom-client";
import { LeanCounter, LeanHistogram, SeriesCache } from "../../src/shared/lean-metrics.js";

const BOUNDS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
const SETS = [
  { method: "POST", route: "/v1/chat/completions", status: "200" },
  { method: "GET", route: 'odd "route" \\ with\nnewline', status: "404" },
  { method: "POST", route: "unmatched", status: "415" },
];

/** The same observations through prom-client and through the lean metrics: both registries' text. */
async function both(observe: (i: number) => { set: number; inc: number; value: number } | null) {
  const promRegistry = new Registry();
  const leanRegistry = new Registry();
  const names = ["method", "route", "status"] as const;
  const promCounter = new Counter({ name: "c_total", help: "a counter", labelNames: names, registers: [promRegistry] });
  const promHistogram = new Histogram({
    name: "h_seconds",
    help: "a histogram",
    labelNames: names,
    buckets: BOUNDS,
    registers: [promRegistry],
  });
  const leanCounter = new LeanCounter("c_total", "a counter", names, leanRegistry);
  const leanHistogram = new LeanHistogram("h_seconds", "a histogram", names, BOUNDS, leanRegistry);
  const counters = SETS.map((s) => leanCounter.child(s));
  const histograms = SETS.map((s) => leanHistogram.child(s));
  for (let i = 0; i < 2_000; i++) {
    const o = observe(i);
    if (!o) continue;
    promCounter.inc(SETS[o.set], o.inc);
    promHistogram.observe(SETS[o.set], o.value);
    counters[o.set](o.inc);
    histograms[o.set](o.value);
  }
  return { prom: await promRegistry.metrics(), lean: await leanRegistry.metrics() };
}

describe("lean metrics", () => {
  it("when values fall in every bucket, on bounds and above the last, then the text is prom-client's", async () => {
    const { prom, lean } = await both((i) => ({
      set: (i * 7) % 3,
      inc: i % 4,
      value: i % 50 === 0 ? 100 + i : i % 13 === 0 ? BOUNDS[i % BOUNDS.length] : (i % 29) * 0.0173,
    }));
    expect(prom).toContain('le="+Inf"');
    expect(lean).toBe(prom);
  });

  it("when a label set is first used late and another never, then series appear in first-use order", async () => {
    const { prom, lean } = await both((i) =>
      i < 1_000 ? { set: 2, inc: 1, value: 0.2 } : { set: 0, inc: 2, value: 3 },
    );
    expect(prom).not.toContain('status="404"');
    expect(lean).toBe(prom);
  });

  it("when nothing was observed, then only the help and type lines, as prom-client's", async () => {
    const { prom, lean } = await both(() => null);
    expect(lean).toBe(prom);
  });

  it("when a value is not finite or a counter would go down, then it is refused as prom-client refuses it", () => {
    const registry = new Registry();
    const counter = new LeanCounter("r_total", "r", ["a"], registry).child({ a: "x" });
    const histogram = new LeanHistogram("r_seconds", "r", ["a"], [1], registry).child({ a: "x" });
    expect(() => counter(-1)).toThrow("decrease");
    expect(() => histogram(Number.NaN)).toThrow(TypeError);
    expect(() => new LeanCounter("s_total", "s", ["a"], registry).child({ b: "x" } as never)).toThrow("label");
  });

  it("when the series are reset, then children made before count into the new series", async () => {
    const registry = new Registry();
    const metric = new LeanCounter("t_total", "t", ["a"], registry);
    const add = metric.child({ a: "x" });
    add(5);
    metric.reset();
    add(2);
    expect(await registry.metrics()).toContain('t_total{a="x"} 2');
  });

  it("when a SeriesCache is asked twice for a key, then it makes the child once", () => {
    const cache = new SeriesCache<object>();
    let made = 0;
    const first = cache.get("k", () => ({ n: ++made }));
    expect(cache.get("k", () => ({ n: ++made }))).toBe(first);
    expect(made).toBe(1);
  });
});
