/** The completion events feed endpoint (issue 6, item 6). */
import type { DataPlaneHandler } from "./deps.js";

/**
 * `GET /v1/responses/events` (DESIGN §3 Completion events feed): `{object: "list", data, has_more}`.
 * A `wait_ms` long-poll ends early when the client disconnects.
 * Errors: 400 (`limit`, `wait_ms`, `stream_id`, unknown or combined cursors), 401.
 */
export const listCompletionEvents: DataPlaneHandler = async (deps, req, res, ctx) => {
  const gone = new AbortController();
  const onClose = () => gone.abort();
  res.once("close", onClose);
  try {
    const page = await deps.events.listFromQuery(ctx, req.query, gone.signal);
    if (!gone.signal.aborted) res.json(page);
  } finally {
    res.off("close", onClose);
  }
};
