/** What data-plane handlers need: services and resolvers, wired once by the server. */
import type { Request, Response } from "express";
import type { Resolvers } from "../../resolvers/index.js";
import type { BackgroundResponsesService } from "../../services/inference/responses/background-responses.service.js";
import type { BatchesService } from "../../services/batches/batches.service.js";
import type { DecisionsService } from "../../services/decisions/decisions.service.js";
import type { CompletionEventsService } from "../../services/events/completion-events.service.js";
import type { RequestContext } from "../../services/platform/context.js";
import type { HealthService } from "../../services/models/health.service.js";
import type { InferenceService } from "../../services/inference/inference.service.js";
import type { ModelCatalogService } from "../../services/models/model-catalog.service.js";
import type { ResponsesService } from "../../services/inference/responses/responses.service.js";
import type { StreamsService } from "../../services/inference/responses/streams.service.js";

export interface DataPlaneDeps {
  resolvers: Resolvers;
  catalog: ModelCatalogService;
  inference: InferenceService;
  responses: ResponsesService;
  background: BackgroundResponsesService;
  events: CompletionEventsService;
  streams: StreamsService;
  health: HealthService;
  batches: BatchesService;
  /** `POST /v1/decisions` (issue 11). */
  decisions: DecisionsService;
  /** Largest `POST /v1/batches` body, bytes (config `batchMaxBytes`). */
  batchMaxBytes: number;
}

/** A data-plane handler: writes the answer itself (JSON or SSE). */
export type DataPlaneHandler = (
  deps: DataPlaneDeps,
  req: Request,
  res: Response,
  ctx: RequestContext,
) => Promise<void> | void;
