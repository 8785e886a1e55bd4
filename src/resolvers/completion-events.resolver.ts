/**
 * Completion events over GraphQL (issue 6, item 7): the feed query with the REST cursors, and the
 * `completionEvents(streamId)` subscription (graphql-ws on `/graphql`) fed by the process's one
 * cache-bus listener through `CompletionEventsService.subscribe`. An event's `stream` is read
 * through the request's stream loader (`loaders.ts`), one query per page.
 */
import { Arg, Ctx, FieldResolver, ID, Int, type PubSub, Query, Resolver, Root, Subscription } from "type-graphql";
import { CompletionEventListType, CompletionEventType } from "../schema/completion-event.types.js";
import { StreamSummaryType } from "../schema/stream.types.js";
import type {
  CompletionEvent,
  CompletionEventList,
  CompletionEventsService,
} from "../services/events/completion-events.service.js";
import { type RequestContext, requirePrincipal } from "../services/platform/context.js";
import type { StreamsService } from "../services/inference/responses/streams.service.js";
import { parseUuidParam } from "../shared/errors.js";
import { streamLoader } from "./loaders.js";

/** The subscription topic; its id is `{teamId, streamId}` (see `completionEventsPubSub`). */
const TOPIC = "completionEvents";

interface EventsTopicId {
  teamId: string;
  streamId: string | null;
}

/**
 * The PubSub type-graphql subscribes through: `subscribe` tails the team's feed in this process
 * (one shared reader per team, woken by NOTIFY from any process); `publish` is unused, since
 * events are published by committing them.
 */
export function completionEventsPubSub(events: CompletionEventsService): PubSub {
  return {
    publish: () => undefined,
    subscribe: (_topic, id) => {
      const { teamId, streamId } = id as EventsTopicId;
      return events.subscribe(teamId, streamId);
    },
  };
}

@Resolver(() => CompletionEventType)
export class CompletionEventsResolver {
  constructor(
    private readonly events: CompletionEventsService,
    private readonly streams: StreamsService,
  ) {}

  @FieldResolver(() => StreamSummaryType, {
    nullable: true,
    description:
      "The team's stream the request named (null without one, or for a stream id no stream was created for).",
  })
  async stream(@Root() event: CompletionEvent, @Ctx() ctx: RequestContext): Promise<StreamSummaryType | null> {
    if (!event.stream_id) return null;
    // Per-request DataLoader: a page of events reads its streams in one query.
    const stream = await streamLoader(ctx, this.streams).load(event.stream_id);
    return stream && StreamSummaryType.from(stream);
  }

  @Query(() => CompletionEventListType, {
    name: "completionEvents",
    description:
      "The team's completion events feed: no cursor → newest first; startingAfter → oldest first after it; endingBefore → newest first before it.",
  })
  completionEventsPage(
    @Ctx() ctx: RequestContext,
    @Arg("streamId", () => ID, { nullable: true }) streamId?: string | null,
    @Arg("limit", () => Int, { nullable: true, description: "1–100, default 20." }) limit?: number | null,
    @Arg("startingAfter", () => ID, { nullable: true }) startingAfter?: string | null,
    @Arg("endingBefore", () => ID, { nullable: true }) endingBefore?: string | null,
  ): Promise<CompletionEventList> {
    return this.events.list(ctx, {
      streamId: streamId ?? undefined,
      limit: limit ?? undefined,
      startingAfter: startingAfter ?? undefined,
      endingBefore: endingBefore ?? undefined,
    });
  }

  @Subscription(() => CompletionEventType, {
    name: "completionEvents",
    description: "The team's completion events (of one stream when given) as they are recorded by any process.",
    topics: TOPIC,
    topicId: ({ context, args }): EventsTopicId => {
      const principal = requirePrincipal(context as RequestContext);
      const streamId = (args as { streamId?: string | null }).streamId;
      return { teamId: principal.teamId, streamId: streamId == null ? null : parseUuidParam("streamId", streamId) };
    },
  })
  completionEventsLive(
    @Root() event: CompletionEvent,
    @Arg("streamId", () => ID, { nullable: true }) _streamId?: string | null,
  ): CompletionEvent {
    return event;
  }
}
