/**
 * Stream ownership and state for the create operations (issue 6, item 4; DESIGN §3 Streams).
 *
 * `StreamDirectory` answers the create operations' questions "which team owns this stream id?"
 * (404 for another team's stream; activity `type: "stream"` for the caller's own) and "does it
 * still take requests?" (400 naming `metadata.stream_id` when the team's stream is `cancelled` or
 * `archived`) with one indexed lookup per unseen id, cached in memory. A stream's team never
 * changes and streams are never deleted, so a cached owner never goes stale. A stream leaves
 * `open` once and never comes back (PATCH sets only `archived` or `cancelled`): the process that
 * closes it marks it closed here at once and announces it on the cache bus (`stream:<id>`), so
 * every other process forgets its cached state. An id no stream was created for is cached as
 * unowned for a few seconds only: a stream's id is chosen by the server at creation, so only a
 * label sent before that creation could be cached wrongly, and it expires quickly.
 */
import type { DataSource } from "typeorm";
import { queryRows } from "../../../db/sql.js";
import type { ActivityType } from "../../../entities/activity.entity.js";
import { AppError } from "../../../shared/errors.js";
import type { CacheBus } from "../../platform/cache-bus.js";

/** How long an id with no stream is remembered as unowned, ms. */
const UNOWNED_TTL_MS = 5_000;
/** Most ids the directory remembers (oldest forgotten first). */
const DIRECTORY_MAX = 10_000;
/** Cache-bus topic announcing that a stream was closed (key: the stream id). */
const STREAM_TOPIC = "stream";

/** A stream's lifecycle state (DESIGN §3 Streams). */
export type StreamStatus = "open" | "archived" | "cancelled";

interface Owned {
  teamId: string;
  status: StreamStatus;
}

/**
 * The 400 for a new request naming one of the team's streams that no longer takes requests
 * (`extra` names `metadata.stream_id`).
 */
export function closedStreamError(status: Exclude<StreamStatus, "open">): AppError {
  return AppError.invalid(`The stream is ${status}: it takes no new requests`, [
    { field: "metadata.stream_id", message: `stream is ${status}` },
  ]);
}

/**
 * Which team owns a stream id and whether it is open: the create operations' check on
 * `metadata.stream_id`. One per process; see the module header for the cache.
 */
export class StreamDirectory {
  /** stream id → its team and state, or `{unownedUntil}` for an id no stream has. */
  private readonly owners = new Map<string, Owned | { unownedUntil: number }>();
  /** Bumped whenever the bus makes the cache forget: a lookup that raced it is not cached. */
  private generation = 0;

  constructor(
    private readonly ds: DataSource,
    /** Where closes are announced across processes; without it, a cached state lives until evicted. */
    private readonly bus?: CacheBus,
  ) {
    bus?.on(STREAM_TOPIC, (streamId) => {
      this.generation++;
      this.owners.delete(streamId);
    });
    bus?.on("*", () => {
      this.generation++;
      this.owners.clear();
    });
  }

  /** Remembers a stream this process created (so its first request pays no lookup). */
  remember(streamId: string, teamId: string): void {
    this.put(streamId, { teamId, status: "open" });
  }

  /**
   * Records that this process closed `streamId` (archived or cancelled, already committed) and
   * tells the other processes to forget what they cached about it.
   */
  async closed(streamId: string, teamId: string, status: Exclude<StreamStatus, "open">): Promise<void> {
    this.put(streamId, { teamId, status });
    await this.bus?.publish(STREAM_TOPIC, streamId, this.ds);
  }

  /**
   * The activity type of a request of `teamId` whose metadata names `streamId`: `stream` for the
   * team's own stream, `standalone` without a stream id or for an id no stream was created for (a
   * label). No database work without a stream id.
   * @param creating true for a request being accepted now: the team's stream must be open. False
   *   for one accepted earlier (a background response a worker runs, a record written later),
   *   which a stream closed since then does not refuse.
   * @throws AppError 404 when the stream belongs to another team (issue 6, item 4); 400 naming
   *   `metadata.stream_id` when `creating` and the team's stream is cancelled or archived.
   */
  async activityType(
    teamId: string,
    metadata: Record<string, unknown> | null | undefined,
    creating = false,
  ): Promise<ActivityType> {
    const streamId = typeof metadata?.stream_id === "string" ? metadata.stream_id : null;
    if (streamId === null) return "standalone";
    const owner = await this.ownerOf(streamId);
    if (owner === null) return "standalone";
    if (owner.teamId !== teamId) throw AppError.notFound("No such stream");
    if (creating && owner.status !== "open") throw closedStreamError(owner.status);
    return "stream";
  }

  private async ownerOf(streamId: string): Promise<Owned | null> {
    const cached = this.owners.get(streamId);
    if (cached && "teamId" in cached) return cached;
    if (cached && cached.unownedUntil > Date.now()) return null;
    const generation = this.generation;
    const [row] = await queryRows<{ team_id: string; status: StreamStatus }>(
      this.ds,
      `SELECT team_id, status FROM streams WHERE id = $1`,
      [streamId],
    );
    const owned = row ? { teamId: row.team_id, status: row.status } : null;
    if (generation === this.generation) this.put(streamId, owned ?? { unownedUntil: Date.now() + UNOWNED_TTL_MS });
    return owned;
  }

  private put(streamId: string, value: Owned | { unownedUntil: number }): void {
    this.owners.delete(streamId);
    this.owners.set(streamId, value);
    if (this.owners.size > DIRECTORY_MAX) {
      const oldest = this.owners.keys().next().value;
      if (oldest !== undefined) this.owners.delete(oldest);
    }
  }
}
