/**
 * Per-request DataLoaders (issue 6, item 7: "DataLoader where a list resolves related rows"): a
 * field resolver asks for one related row, and every ask made in one tick of one request is read
 * in one query (a page of 100 events resolves its streams in one `SELECT … WHERE id = ANY(…)`).
 * One loader per request context (an HTTP request, or one graphql-ws operation), kept in a
 * WeakMap so it goes with its request. Loaders batch but do not cache: a subscription's context
 * lives as long as the subscription, and a cached stream would go stale (renamed, cancelled).
 */
import DataLoader from "dataloader";
import type { RequestContext } from "../services/platform/context.js";
import type { StreamSummary, StreamsService } from "../services/inference/responses/streams.service.js";

const streamLoaders = new WeakMap<RequestContext, DataLoader<string, StreamSummary | null>>();

/** The request's loader of the caller's team's streams by id (null: no stream of the team). */
export function streamLoader(ctx: RequestContext, streams: StreamsService): DataLoader<string, StreamSummary | null> {
  let loader = streamLoaders.get(ctx);
  if (!loader) {
    loader = new DataLoader((ids) => streams.summaries(ctx, ids), { cache: false, maxBatchSize: 1000 });
    streamLoaders.set(ctx, loader);
  }
  return loader;
}
