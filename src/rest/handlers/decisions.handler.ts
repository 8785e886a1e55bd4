/** `POST /v1/decisions` (DESIGN §3 Decisions; issue 11). */
import type { DataPlaneHandler } from "./deps.js";
import { bodyBytes } from "../json-body.js";
import { abortOnClose } from "./generation.js";

/**
 * `POST /v1/decisions`: `{model, state, questions}` → `{model, answers, usage}` through
 * `DecisionsService` (the GraphQL mutation's service). Errors: 400 naming the offending question
 * or field, 401, 402, 404 unknown model, 413 over 1 MiB, 429, 502/503.
 */
export const createDecision: DataPlaneHandler = async (deps, req, res, ctx) => {
  // The 1 MiB limit is on the body as sent (DESIGN §3 Decisions), which the route's parser measured.
  const out = await deps.decisions.decide(ctx, req.body, abortOnClose(res), bodyBytes(req));
  res.locals.engineMs = out.engineMs;
  res.json(out.body);
};
