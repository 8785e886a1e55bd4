/**
 * Pricing history (issue 10, item 3; DESIGN §3 Money): the prices each model has had, and the one
 * in force at a given instant. A request is charged at the price in force when it was RECEIVED
 * (its `createdAt`), even when the price changes while it runs.
 *
 * Rules (also in README "Pricing history"):
 * - Versions live in `model_prices` (micro-USD per million tokens, bigint). A version is in force
 *   from its `effective_from` until the next version of the same model.
 * - At start-up every process compares its catalog with the latest stored version of each model
 *   (`sync`). The first version of a model is effective from the Unix epoch: requests recorded
 *   before the history existed were charged the catalog price of their day, which is unknown, so
 *   the first known price stands for all of them (and every activity row has a version; a release
 *   date would leave older rows, e.g. imported or generated ones, without one). A later difference
 *   adds a version effective at the database's clock at that moment, in whole milliseconds (as
 *   JavaScript dates, and so `activity.created_at`, are kept: the SQL join of the billing summary
 *   and this lookup then agree on every request).
 * - The hot path never reads the database: versions are loaded at start and reloaded when the
 *   cache bus announces `price:*` (published by the transaction that adds a version) or after the
 *   listener reconnects (`*`). A request received after another process added a version, and
 *   finished before this process heard of it (normally milliseconds), is charged the previous price.
 * - Processes with different catalogs on one database: prices are shared, not per process. Each
 *   process, when it starts, makes its catalog's price the latest version if it differs, so the
 *   process that started last sets the price for every process; a process restarted with an older
 *   catalog changes the price back (documented; deploy catalogs together).
 * - Models with no stored version (added after start, e.g. custom models) are charged their
 *   catalog `prices`.
 */
import type { Logger } from "pino";
import type { DataSource } from "typeorm";
import type { CatalogModel } from "../../config/catalog.js";
import { queryRows } from "../../db/sql.js";
import type { TokenPrices } from "../../shared/money.js";
import type { CacheBus } from "../platform/cache-bus.js";

/** The cache-bus topic announcing a new price version (key: the model id). */
export const PRICE_TOPIC = "price";

/** Advisory-lock key that serialises `sync` across processes starting at once. */
const PRICE_SYNC_LOCK = 7_240_750;

/** One stored price version of a model. */
export interface PriceVersion {
  modelId: string;
  effectiveFrom: Date;
  prices: TokenPrices;
}

interface PriceRow {
  model_id: string;
  effective_from: Date;
  input_per_million_micros: string;
  cached_input_per_million_micros: string;
  output_per_million_micros: string;
}

function version(r: PriceRow): PriceVersion {
  return {
    modelId: r.model_id,
    effectiveFrom: new Date(r.effective_from),
    prices: {
      inputPerMillionMicros: BigInt(r.input_per_million_micros),
      cachedInputPerMillionMicros: BigInt(r.cached_input_per_million_micros),
      outputPerMillionMicros: BigInt(r.output_per_million_micros),
    },
  };
}

function samePrices(a: TokenPrices, b: TokenPrices): boolean {
  return (
    a.inputPerMillionMicros === b.inputPerMillionMicros &&
    a.cachedInputPerMillionMicros === b.cachedInputPerMillionMicros &&
    a.outputPerMillionMicros === b.outputPerMillionMicros
  );
}

/** What the create operations need: the price of a model at an instant (in memory). */
export interface PriceLookup {
  /** The prices of `model` in force at `at` (the request's `createdAt`). */
  pricesAt(model: CatalogModel, at: Date): TokenPrices;
}

/** The price versions of every model, kept in memory and refreshed through the cache bus. */
export class PriceBook implements PriceLookup {
  /** Versions by model id, oldest first. */
  private versions = new Map<string, PriceVersion[]>();
  /** Loads are chained so a slow earlier load never replaces a later one. */
  private loading: Promise<void> = Promise.resolve();
  /** Completed loads (tests wait for a reload). */
  loads = 0;

  constructor(
    private readonly ds: DataSource,
    private readonly bus: CacheBus,
    private readonly logger: Logger,
  ) {}

  /**
   * Makes each catalog model's price the latest stored version (see the rules above), announces
   * new versions on the cache bus, listens for others' and loads every version.
   * @returns the versions this call added.
   * @throws the driver's error when the database cannot be written.
   */
  async start(models: CatalogModel[]): Promise<PriceVersion[]> {
    this.bus.on(PRICE_TOPIC, () => void this.reload());
    this.bus.on("*", () => void this.reload());
    const added = await this.ds.transaction(async (m) => {
      await m.query("SELECT pg_advisory_xact_lock($1)", [PRICE_SYNC_LOCK]);
      const latest = await queryRows<PriceRow>(
        m,
        `SELECT DISTINCT ON (model_id) * FROM model_prices ORDER BY model_id, effective_from DESC`,
      );
      const byModel = new Map(latest.map((r) => [r.model_id, version(r)]));
      const rows: PriceVersion[] = [];
      for (const model of models) {
        const stored = byModel.get(model.id);
        if (stored && samePrices(stored.prices, model.prices)) continue;
        const [row] = await queryRows<PriceRow>(
          m,
          `INSERT INTO model_prices (model_id, effective_from, input_per_million_micros,
                                     cached_input_per_million_micros, output_per_million_micros)
           VALUES ($1, CASE WHEN $2 THEN date_trunc('milliseconds', clock_timestamp()) ELSE 'epoch'::timestamptz END, $3, $4, $5)
           RETURNING *`,
          [
            model.id,
            stored !== undefined,
            model.prices.inputPerMillionMicros.toString(),
            model.prices.cachedInputPerMillionMicros.toString(),
            model.prices.outputPerMillionMicros.toString(),
          ],
        );
        rows.push(version(row));
        await this.bus.publish(PRICE_TOPIC, model.id, m);
      }
      return rows;
    });
    for (const v of added) {
      this.logger.info(
        { model: v.modelId, effectiveFrom: v.effectiveFrom.toISOString() },
        "model price version added from the catalog",
      );
    }
    await this.reload();
    return added;
  }

  /** Reloads every version from the database (after a `price` announcement). */
  reload(): Promise<void> {
    this.loading = this.loading.then(
      () => this.load(),
      () => this.load(),
    );
    return this.loading;
  }

  private async load(): Promise<void> {
    try {
      const rows = await queryRows<PriceRow>(this.ds, "SELECT * FROM model_prices ORDER BY model_id, effective_from");
      const versions = new Map<string, PriceVersion[]>();
      for (const r of rows) {
        const list = versions.get(r.model_id) ?? [];
        list.push(version(r));
        versions.set(r.model_id, list);
      }
      this.versions = versions;
      this.loads++;
    } catch (err) {
      this.logger.warn({ err }, "could not reload model prices; keeping the versions loaded before");
    }
  }

  /** The stored versions of `modelId`, oldest first (empty when none). */
  history(modelId: string): readonly PriceVersion[] {
    return this.versions.get(modelId) ?? [];
  }

  /**
   * The prices of `model` in force at `at`: the latest version with `effective_from <= at` of the
   * model whose prices it takes — its reference model (`limitKey`: a team's custom model is priced
   * as the platform model whose weights it runs, else as the default model; issue 9 review,
   * finding 3), else itself — and the model's catalog prices when that has no stored version (or
   * `at` precedes them all). Never by a custom model's own id: versions stored under a platform
   * model dropped from the catalog would price a custom model that took its name (issue 10 review,
   * finding 8).
   */
  pricesAt(model: CatalogModel, at: Date): TokenPrices {
    const list = this.versions.get(model.limitKey ?? model.id);
    if (!list) return model.prices;
    const t = at.getTime();
    for (let i = list.length - 1; i >= 0; i--) {
      if (list[i].effectiveFrom.getTime() <= t) return list[i].prices;
    }
    return model.prices;
  }
}
