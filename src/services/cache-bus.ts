/**
 * Cross-process cache invalidation over PostgreSQL LISTEN/NOTIFY (DESIGN §1: caches "invalidated
 * through NOTIFY"). Each process keeps one listening connection; `publish` sends on the channel
 * (inside a transaction it is delivered at commit) and every process, this one included, runs
 * the handlers registered for the message's topic.
 */
import pg from "pg";
import type { Logger } from "pino";
import type { EntityManager } from "typeorm";

export const CACHE_CHANNEL = "switchyard_cache";

type Handler = (key: string) => void;

export class CacheBus {
  private client?: pg.Client;
  private readonly handlers = new Map<string, Handler[]>();
  private closed = false;

  constructor(
    private readonly databaseUrl: string,
    private readonly logger: Logger,
  ) {}

  /** Opens the listening connection; reconnects after errors until `close`. */
  async start(): Promise<void> {
    const client = new pg.Client({ connectionString: this.databaseUrl, application_name: "switchyard-listen" });
    client.on("notification", (msg) => {
      if (msg.channel !== CACHE_CHANNEL || !msg.payload) return;
      const sep = msg.payload.indexOf(":");
      this.deliverLocally(msg.payload.slice(0, sep), msg.payload.slice(sep + 1));
    });
    client.on("error", (err) => {
      this.logger.warn({ err }, "cache listener lost its connection; reconnecting");
      this.handlers.get("*")?.forEach((h) => h(""));
      void client.end().catch(() => undefined);
      if (!this.closed) setTimeout(() => void this.start().catch(() => undefined), 1000).unref();
    });
    await client.connect();
    await client.query(`LISTEN ${CACHE_CHANNEL}`);
    this.client = client;
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

  async close(): Promise<void> {
    this.closed = true;
    await this.client?.end().catch(() => undefined);
  }
}
