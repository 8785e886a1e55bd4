/**
 * Stored responses (spec: `GET /v1/responses`, `GET` and `DELETE /v1/responses/{response_id}`):
 * the Response objects creates stored with `store: true`, for the caller's team only.
 */
import type { DataSource } from "typeorm";
import { z } from "zod";
import { queryRows } from "../../../db/sql.js";
import { type RequestContext, requirePrincipal } from "../../platform/context.js";
import { AppError, parseInput, parseUuidParam } from "../../../shared/errors.js";
import { unixSeconds } from "../../platform/identifiers.js";
import type { ChatMessage } from "../../../inference/engine.js";
import { type ResponseObject, responseMessages, responseRequest } from "../protocols/openai-responses.protocol.js";
import { optionalQuery, queryInt } from "../../platform/validation.js";

/** How many responses back a `previous_response_id` chain is followed. */
export const MAX_CHAIN = 100;

/** `GET /v1/responses` query (DESIGN §3 List limits: `limit` 1–1000, default 100). */
export const listResponsesQuery = z.object({
  limit: optionalQuery(queryInt(1, 1000)),
  stream_id: optionalQuery(z.uuid()),
});

/** spec: Response list item. */
export interface ResponseListItem {
  id: string;
  object: "response";
  /** Unix seconds. */
  created_at: number;
  model: string;
  status: string;
}

export interface ResponseList {
  object: "list";
  data: ResponseListItem[];
  has_more: boolean;
}

/** Reads, lists and deletes stored Response objects, scoped to the caller's team. */
export class ResponsesService {
  constructor(private readonly ds: DataSource) {}

  /**
   * @returns the stored Response object.
   * @throws AppError 400 when `id` is not a uuid; 401; 404 when unknown, not stored, or another team's.
   */
  async get(ctx: RequestContext, id: unknown): Promise<ResponseObject> {
    const principal = requirePrincipal(ctx);
    const responseId = parseUuidParam("response_id", id);
    const rows = await queryRows<{ response_json: ResponseObject }>(
      this.ds,
      "SELECT response_json FROM responses WHERE id = $1 AND team_id = $2",
      [responseId, principal.teamId],
    );
    if (!rows[0]) throw AppError.notFound("Response not found");
    return rows[0].response_json;
  }

  /**
   * The conversation a Responses create continues (`previous_response_id`; issue 26, item 4): the
   * chain of stored responses it names, oldest first, each as its input messages (its
   * `instructions` are not carried over, OpenAI's rule) followed by its output as the assistant's
   * turn (its text, and its function calls as the turn's calls). At most `MAX_CHAIN` responses back
   * (older turns are left out then).
   * @throws AppError 400 naming `previous_response_id` when it is not a uuid, when that response was
   *   not stored (`store: false`, zero data retention) or is still in progress, or when a response
   *   its chain continues was deleted since (within `MAX_CHAIN`; never a silently shorter
   *   history); 404 when unknown or another team's.
   */
  async conversation(ctx: RequestContext, id: string): Promise<ChatMessage[]> {
    const principal = requirePrincipal(ctx);
    const field = "previous_response_id";
    if (!z.uuid().safeParse(id).success) {
      throw AppError.invalid(`Invalid request: ${field}`, [{ field, message: "is not a response id" }]);
    }
    const rows = await queryRows<{ status: string; request_json: unknown; response_json: ResponseObject }>(
      this.ds,
      `WITH RECURSIVE chain AS (
         SELECT id, status, request_json, response_json, 0 AS depth FROM responses WHERE id = $1 AND team_id = $2
         UNION ALL
         SELECT r.id, r.status, r.request_json, r.response_json, c.depth + 1
           FROM chain c JOIN responses r
             ON r.id = CASE WHEN c.request_json->>'previous_response_id' ~* '^[0-9a-f-]{36}$'
                            THEN (c.request_json->>'previous_response_id')::uuid END
            AND r.team_id = $2
          WHERE c.depth < $3
       )
       SELECT status, request_json, response_json FROM chain ORDER BY depth DESC`,
      [id, principal.teamId, MAX_CHAIN - 1],
    );
    if (rows.length === 0) {
      // Unstored responses leave their activity row without a body (store: false, zero data retention).
      const [unstored] = await queryRows(
        this.ds,
        "SELECT 1 FROM activity WHERE id = $1 AND team_id = $2 AND endpoint = '/v1/responses' AND body_json IS NULL",
        [id, principal.teamId],
      );
      if (unstored) {
        throw AppError.invalid(`Response ${id} was not stored (store: false), so it cannot be continued`, [
          { field, message: "names a response that was not stored" },
        ]);
      }
      throw AppError.notFound("Response not found");
    }
    if (rows.at(-1)!.status === "in_progress") {
      throw AppError.invalid(`Response ${id} is still in progress`, [{ field, message: "is still in progress" }]);
    }
    // The oldest response read still continues one, and the chain is not at its cap: that one was
    // deleted (issue 26 review, finding 15). Continuing without it would drop part of the history.
    const missing = rows.length < MAX_CHAIN ? previousId(rows[0].request_json) : null;
    if (missing) {
      throw AppError.invalid(
        `The conversation of response ${id} includes response ${missing}, which was deleted; it cannot be continued`,
        [{ field, message: `its conversation includes a deleted response (${missing})` }],
      );
    }
    return rows.flatMap((r) => {
      const parsed = responseRequest.safeParse(r.request_json);
      const input = parsed.success ? responseMessages({ ...parsed.data, instructions: null }).messages : [];
      const output = r.response_json.output;
      const text = output.flatMap((item) =>
        item.type === "message" ? [item.content.map((c) => c.text).join("")] : [],
      );
      const calls = output.flatMap((item) =>
        item.type === "function_call" ? [{ id: item.call_id, name: item.name, arguments: item.arguments }] : [],
      );
      const answer: ChatMessage = { role: "assistant", content: text.join("\n") };
      return [...input, calls.length > 0 ? { ...answer, toolCalls: calls } : answer];
    });
  }

  /**
   * The team's stored responses, newest first: up to `limit` (default 100), optionally of one
   * `stream_id`; `has_more` when older ones exist.
   * @throws AppError 400 for `limit` outside 1–1000 or a non-uuid `stream_id`; 401.
   */
  async list(ctx: RequestContext, query: unknown): Promise<ResponseList> {
    const principal = requirePrincipal(ctx);
    const q = parseInput(listResponsesQuery, query);
    const limit = q.limit ?? 100;
    const rows = await queryRows<{ id: string; created_at: Date; model: string; status: string }>(
      this.ds,
      `SELECT id, created_at, model, status FROM responses
        WHERE team_id = $1 AND ($2::uuid IS NULL OR stream_id = $2)
        ORDER BY id DESC LIMIT $3`,
      [principal.teamId, q.stream_id ?? null, limit + 1],
    );
    return {
      object: "list",
      data: rows.slice(0, limit).map((r) => ({
        id: r.id,
        object: "response",
        created_at: unixSeconds(r.created_at),
        model: r.model,
        status: r.status,
      })),
      has_more: rows.length > limit,
    };
  }

  /**
   * Deletes a stored response and returns it as it stood (DESIGN §3 Responses); later reads 404.
   * Every response of this build is finished when stored, so there is nothing to cancel.
   * @throws AppError 400 when `id` is not a uuid; 401; 404 when unknown or another team's.
   */
  async delete(ctx: RequestContext, id: unknown): Promise<ResponseObject> {
    const principal = requirePrincipal(ctx);
    const responseId = parseUuidParam("response_id", id);
    const rows = await queryRows<{ response_json: ResponseObject }>(
      this.ds,
      "DELETE FROM responses WHERE id = $1 AND team_id = $2 RETURNING response_json",
      [responseId, principal.teamId],
    );
    if (!rows[0]) throw AppError.notFound("Response not found");
    return rows[0].response_json;
  }
}

/** The `previous_response_id` a stored request continues, or null. */
function previousId(requestJson: unknown): string | null {
  const previous = (requestJson as { previous_response_id?: unknown } | null)?.previous_response_id;
  return typeof previous === "string" && previous !== "" ? previous : null;
}
