/** Streams endpoints (issue 6, item 4; DESIGN §3 Streams): thin calls into `StreamsService`. */
import type { DataPlaneHandler } from "./deps.js";

/** `POST /v1/streams` → 201 the stream. Errors: 400 (`name`, `window`), 401. */
export const createStream: DataPlaneHandler = async (deps, req, res, ctx) => {
  res.status(201).json(await deps.streams.create(ctx, req.body));
};

/** `GET /v1/streams` → `{items}`, newest first. Errors: 401. */
export const listStreams: DataPlaneHandler = async (deps, _req, res, ctx) => {
  res.json(await deps.streams.list(ctx));
};

/** `GET /v1/streams/{id}` → the stream with its counters. Errors: 400 bad id, 401, 404. */
export const getStream: DataPlaneHandler = async (deps, req, res, ctx) => {
  res.json(await deps.streams.get(ctx, req.params.stream_id));
};

/** `PATCH /v1/streams/{id}` → 200 the stream. Errors: 400 (`name`, `status`, bad id), 401, 404. */
export const updateStream: DataPlaneHandler = async (deps, req, res, ctx) => {
  res.json(await deps.streams.update(ctx, req.params.stream_id, req.body));
};
