/**
 * Stored responses (spec: `GET /v1/responses/{response_id}`): reads the Response object a create
 * stored with `store: true`, for the caller's team only.
 */
import type { DataSource } from "typeorm";
import { queryRows } from "../db/sql.js";
import { type RequestContext, requirePrincipal } from "./context.js";
import { AppError, parseUuidParam } from "./errors.js";
import type { ResponseObject } from "./protocols/openai-responses.protocol.js";

/** Reads stored Response objects, scoped to the caller's team. */
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
}
