/**
 * Cross-process cache invalidation over PostgreSQL LISTEN/NOTIFY (DESIGN §1: caches "invalidated
 * through NOTIFY"). Each process keeps one listening connection; `publish` sends on the channel
 * (inside a transaction it is delivered at commit) and every process, this one included, runs
 * the handlers registered for the message's topic.
 */
import pg from "pg";
import type { Logger } from "pino";
import type { EntityManager } from "typeorm";
import { assertSession } from "../../db/session.js";

export const CACHE_CHANNEL = "switchyard_cache";

type Handler = (key: string) => void;

/** One LISTEN connection per process on `switchyard_cache`; handlers by topic (`api_key`, `user`, `balance`, `*`). */
export class CacheBus {
  private client?: pg.Client;
  private readonly handlers = new Map<string, Handler[]>();
  private closed = false;

  constructor(
    private readonly databaseUrl: string,
    private readonly logger: Logger,
    /**
     * More node-postgres settings of the listening connection: the pools' session bounds and
     * connect timeout (issue 28, item 1).
     */
    private readonly settings: pg.ClientConfig = { connectionTimeoutMillis: 10_000 },
  ) {}

  /**
   * Opens the listening connection. After a lost connection it reconnects with backoff (1 s
   * doubling to 30 s) until `close`, and once listening again runs the `*` handlers: whatever was
   * announced while it was away is unknown, so caches start over.
   * @throws NoSessionError when the URL is a transaction-mode pooler (a LISTEN there is heard by
   *   a server connection nobody reads, issue 31 item 3); the driver's error when the first
   *   connection fails.
   */
  async start(): Promise<void> {
    await assertSession(this.databaseUrl, "the cache bus's LISTEN");
    const client = new pg.Client({
      connectionTimeoutMillis: 10_000,
      ...this.settings,
      connectionString: this.databaseUrl,
      application_name: "switchyard-listen",
      // TCP keepalive: a silently dropped connection errors (and reconnects) instead of going deaf.
      keepAlive: true,
    });
    client.on("notification", (msg) => {
      if (msg.channel !== CACHE_CHANNEL || !msg.payload) return;
      const sep = msg.payload.indexOf(":");
      this.deliverLocally(msg.payload.slice(0, sep), msg.payload.slice(sep + 1));
    });
    client.on("error", (err) => {
      if (this.client !== client) return;
      this.client = undefined;
      this.logger.warn({ err }, "cache listener lost its connection; reconnecting");
      this.deliverLocally("*", "");
      void client.end().catch(() => undefined);
      void this.reconnect();
    });
    try {
      await client.connect();
      await client.query(`LISTEN ${CACHE_CHANNEL}`);
    } catch (err) {
      await client.end().catch(() => undefined);
      throw err;
    }
    if (this.closed) {
      // `close` ran while this connection was being made (during a reconnect).
      await client.end().catch(() => undefined);
      return;
    }
    this.client = client;
  }

  private async reconnect(): Promise<void> {
    for (let delay = 1000; !this.closed; delay = Math.min(delay * 2, 30_000)) {
      await new Promise((r) => setTimeout(r, delay).unref());
      if (this.closed) return;
      try {
        await this.start();
        this.deliverLocally("*", "");
        this.logger.info("cache listener reconnected");
        return;
      } catch (err) {
        this.logger.warn({ err, retryInMs: Math.min(delay * 2, 30_000) }, "cache listener could not reconnect");
      }
    }
  }

  /** Registers `handler` for messages `topic:key`. Topic `*` is called (with "") after a reconnect. */
  on(topic: string, handler: Handler): void {
    const list = this.handlers.get(topic) ?? [];
    list.push(handler);
    this.handlers.set(topic, list);
  }

  /** Sends `topic:key` to every process; through `manager` it is sent when that transaction commits. */
  async publish(topic: string, key: string, manager: Pick<EntityManager, "query">): Promise<void> {
    await manager.query("SELECT pg_notify($1, $2)", [CACHE_CHANNEL, `${topic}:${key}`]);
  }

  /** Runs this process's handlers for `topic:key` now (after a commit, before the NOTIFY echo). */
  deliverLocally(topic: string, key: string): void {
    for (const h of this.handlers.get(topic) ?? []) h(key);
  }

  /** Closes the listening connection: politely, or after 1 s at once (a frozen server never answers). */
  async close(): Promise<void> {
    this.closed = true;
    const client = this.client;
    this.client = undefined;
    if (!client) return;
    let timer: NodeJS.Timeout | undefined;
    const ended = await Promise.race([
      client.end().then(
        () => true,
        () => true,
      ),
      new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), 1_000))),
    ]);
    clearTimeout(timer);
    if (!ended) (client as unknown as { connection?: { stream?: { destroy(): void } } }).connection?.stream?.destroy();
  }
}
