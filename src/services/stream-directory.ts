/**
 * Stream ownership for the create operations (issue 6, item 4; DESIGN §3 Streams).
 *
 * `StreamDirectory` answers the create operations' question "which team owns this stream id?"
 * (404 for another team's stream; activity `type: "stream"` for the caller's own) with one indexed
 * lookup per unseen id, cached in memory. A stream's team never changes and streams are never
 * deleted, so a cached owner never goes stale. An id no stream was created for is cached as
 * unowned for a few seconds only: a stream's id is chosen by the server at creation, so only a
 * label sent before that creation could be cached wrongly, and it expires quickly.
 */
import type { DataSource } from "typeorm";
import { queryRows } from "../db/sql.js";
import type { ActivityType } from "../entities/activity.entity.js";
import { AppError } from "../shared/errors.js";

/** How long an id with no stream is remembered as unowned, ms. */
const UNOWNED_TTL_MS = 5_000;
/** Most ids the directory remembers (oldest forgotten first). */
const DIRECTORY_MAX = 10_000;

/**
 * Which team owns a stream id: the create operations' check on `metadata.stream_id`. One per
 * process; see the module header for the cache.
 */
export class StreamDirectory {
  /** stream id → owning team id, or `{unownedUntil}` for an id no stream has. */
  private readonly owners = new Map<string, string | { unownedUntil: number }>();

  constructor(private readonly ds: DataSource) {}

  /** Remembers a stream this process created (so its first request pays no lookup). */
  remember(streamId: string, teamId: string): void {
    this.put(streamId, teamId);
  }

  /**
   * The activity type of a request of `teamId` whose metadata names `streamId`: `stream` for the
   * team's own stream, `standalone` without a stream id or for an id no stream was created for (a
   * label). No database work without a stream id.
   * @throws AppError 404 when the stream belongs to another team (issue 6, item 4).
   */
  async activityType(teamId: string, metadata: Record<string, unknown> | null | undefined): Promise<ActivityType> {
    const streamId = typeof metadata?.stream_id === "string" ? metadata.stream_id : null;
    if (streamId === null) return "standalone";
    const owner = await this.ownerOf(streamId);
    if (owner === null) return "standalone";
    if (owner !== teamId) throw AppError.notFound("No such stream");
    return "stream";
  }

  private async ownerOf(streamId: string): Promise<string | null> {
    const cached = this.owners.get(streamId);
    if (typeof cached === "string") return cached;
    if (cached && cached.unownedUntil > Date.now()) return null;
    const [row] = await queryRows<{ team_id: string }>(this.ds, `SELECT team_id FROM streams WHERE id = $1`, [
      streamId,
    ]);
    this.put(streamId, row ? row.team_id : { unownedUntil: Date.now() + UNOWNED_TTL_MS });
    return row ? row.team_id : null;
  }

  private put(streamId: string, value: string | { unownedUntil: number }): void {
    this.owners.delete(streamId);
    this.owners.set(streamId, value);
    if (this.owners.size > DIRECTORY_MAX) {
      const oldest = this.owners.keys().next().value;
      if (oldest !== undefined) this.owners.delete(oldest);
    }
  }
}
