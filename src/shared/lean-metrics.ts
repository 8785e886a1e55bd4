/**
 * Labelled counters and histograms for the metrics every request touches (issue 30, item 3):
 * prom-client's `inc(labels, v)` / `observe(labels, v)` validate the label names, build a hash
 * string of the labels and look it up on every call (~0.35 µs a counter, ~0.7 µs a histogram
 * with number-keyed buckets, eight of them per request). Here a label set is looked up once
 * (`series`), and what a request does is an addition into that series' numbers. They register in
 * a prom-client `Registry` as metrics of their own and render exactly as prom-client's `Counter`
 * and `Histogram` do (same lines, same order: label sets as first seen, a histogram's cumulative
 * buckets, `+Inf`, `_sum`, `_count`), so `/metrics` reads the same.
 */
import type { Registry } from "prom-client";

/** One sample as prom-client's registry renders it (`getForPromString`). */
interface Sample {
  value: number;
  labels: Record<string, string | number>;
  sharedLabels?: Record<string, string>;
  metricName?: string;
}

/** What prom-client's registry reads of a metric. */
interface Rendered {
  name: string;
  help: string;
  type: "counter" | "histogram";
  values: Sample[];
  aggregator: "sum";
}

/** One label set of a histogram: counts per upper bound (not cumulative), sum and count. */
interface HistogramSeries {
  labels: Record<string, string>;
  counts: Float64Array;
  sum: number;
  count: number;
}

/** Most children a `SeriesCache` keeps; past it, it starts over (the series and their values stay). */
const MAX_CACHED_SERIES = 1_000;

/** The series key of a label set: its values in label-name order. */
function seriesKey(labelNames: readonly string[], labels: Record<string, string>): string {
  let key = "";
  for (const name of labelNames) key += `${labels[name] ?? ""}\u0000`;
  return key;
}

/** @throws Error naming a label that is not one of `labelNames` (as prom-client refuses it). */
function checkLabels(labelNames: readonly string[], labels: Record<string, string>): void {
  for (const name of Object.keys(labels)) {
    if (!labelNames.includes(name)) throw new Error(`Added label "${name}" is not included in initial labelset`);
  }
}

/** A counter with labels `L` (see the module header). */
export class LeanCounter<L extends string> {
  readonly type = "counter";
  readonly aggregator = "sum";
  private readonly series = new Map<string, { labels: Record<string, string>; value: number }>();
  /** Bumped by `reset`: children look their series up again. */
  private generation = 0;
  private readonly labelNames: readonly L[];

  constructor(
    readonly name: string,
    readonly help: string,
    labelNames: readonly L[],
    registry: Registry,
  ) {
    this.labelNames = labelNames;
    registry.registerMetric(this as never);
  }

  /**
   * The adder of one label set: `add(v)` adds `v` (default 1; not negative, finite). Keep it. The
   * series appears at its first addition (as prom-client's would).
   */
  child(labels: Record<L, string>): (value?: number) => void {
    checkLabels(this.labelNames, labels);
    const key = seriesKey(this.labelNames, labels);
    let cell: { labels: Record<string, string>; value: number } | undefined;
    let generation = -1;
    return (value = 1) => {
      if (!Number.isFinite(value)) throw new TypeError(`Value is not a valid number: ${value}`);
      if (value < 0) throw new Error("It is not possible to decrease a counter");
      if (generation !== this.generation) {
        generation = this.generation;
        cell = this.series.get(key);
        if (!cell) {
          cell = { labels: { ...labels }, value: 0 };
          this.series.set(key, cell);
        }
      }
      cell!.value += value;
    };
  }

  /** Adds `value` (default 1) to the series of `labels`. */
  inc(labels: Record<L, string>, value = 1): void {
    this.child(labels)(value);
  }

  getForPromString(): Rendered {
    const values = [...this.series.values()].map((s) => ({ value: s.value, labels: s.labels }));
    return { name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator };
  }

  get(): Rendered {
    return this.getForPromString();
  }

  reset(): void {
    this.series.clear();
    this.generation++;
  }
}

/** A histogram with labels `L` and fixed upper bounds (see the module header). */
export class LeanHistogram<L extends string> {
  readonly type = "histogram";
  readonly aggregator = "sum";
  private readonly series = new Map<string, HistogramSeries>();
  /** Bumped by `reset`: children look their series up again. */
  private generation = 0;
  private readonly labelNames: readonly L[];
  private readonly upperBounds: readonly number[];

  constructor(
    readonly name: string,
    readonly help: string,
    labelNames: readonly L[],
    upperBounds: readonly number[],
    registry: Registry,
  ) {
    this.labelNames = labelNames;
    this.upperBounds = [...upperBounds].sort((a, b) => a - b);
    registry.registerMetric(this as never);
  }

  /**
   * The observer of one label set: `observe(v)` counts `v` (finite) in its bucket. Keep it. The
   * series appears at its first observation (as prom-client's would).
   */
  child(labels: Record<L, string>): (value: number) => void {
    checkLabels(this.labelNames, labels);
    const key = seriesKey(this.labelNames, labels);
    const bounds = this.upperBounds;
    let cell: HistogramSeries | undefined;
    let generation = -1;
    return (value) => {
      if (!Number.isFinite(value)) throw new TypeError(`Value is not a valid number: ${value}`);
      if (generation !== this.generation) {
        generation = this.generation;
        cell = this.series.get(key);
        if (!cell) {
          cell = { labels: { ...labels }, counts: new Float64Array(bounds.length), sum: 0, count: 0 };
          this.series.set(key, cell);
        }
      }
      const found = cell!;
      for (let i = 0; i < bounds.length; i++) {
        if (value <= bounds[i]) {
          found.counts[i]++;
          break;
        }
      }
      found.sum += value;
      found.count++;
    };
  }

  /** Counts `value` in the series of `labels`. */
  observe(labels: Record<L, string>, value: number): void {
    this.child(labels)(value);
  }

  getForPromString(): Rendered {
    const values: Sample[] = [];
    for (const s of this.series.values()) {
      let cumulative = 0;
      this.upperBounds.forEach((le, i) => {
        cumulative += s.counts[i];
        values.push({ value: cumulative, labels: { le }, sharedLabels: s.labels, metricName: `${this.name}_bucket` });
      });
      values.push({
        value: s.count,
        labels: { le: "+Inf" },
        sharedLabels: s.labels,
        metricName: `${this.name}_bucket`,
      });
      values.push({ value: s.sum, labels: {}, sharedLabels: s.labels, metricName: `${this.name}_sum` });
      values.push({ value: s.count, labels: {}, sharedLabels: s.labels, metricName: `${this.name}_count` });
    }
    return { name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator };
  }

  get(): Rendered {
    const rendered = this.getForPromString();
    rendered.values = rendered.values.map(({ sharedLabels, labels, ...rest }) => ({
      ...rest,
      labels: { ...labels, ...sharedLabels },
    }));
    return rendered;
  }

  reset(): void {
    this.series.clear();
    this.generation++;
  }
}

/**
 * Children of a metric kept per label set, for callers that know the label values but not the
 * child: `get(key, make)` returns the child made once for `key` (at most `MAX_CACHED_SERIES`).
 */
export class SeriesCache<T> {
  private readonly children = new Map<string, T>();

  get(key: string, make: () => T): T {
    let child = this.children.get(key);
    if (child === undefined) {
      if (this.children.size >= MAX_CACHED_SERIES) this.children.clear();
      child = make();
      this.children.set(key, child);
    }
    return child;
  }
}
