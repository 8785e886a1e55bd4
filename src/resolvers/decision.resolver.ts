/**
 * Decisions over GraphQL (issue 11, item 6): thin over `DecisionsService`, the service
 * `POST /v1/decisions` uses (same validation, metering and records).
 */
import { Arg, Ctx, Int, Mutation, Resolver } from "type-graphql";
import { DecisionType } from "../schema/decision.types.js";
import { JSONObjectScalar } from "../shared/json-scalar.js";
import type { RequestContext } from "../services/platform/context.js";
import type { DecisionsService } from "../services/decisions/decisions.service.js";

@Resolver()
export class DecisionResolver {
  constructor(private readonly decisions: DecisionsService) {}

  @Mutation(() => DecisionType, {
    description:
      "Asks 1–64 choice, score or yes/no (noul) questions about one input; probabilities from the model's token log-probabilities.",
  })
  async createDecision(
    @Arg("model") model: string,
    @Arg("state", () => JSONObjectScalar, {
      nullable: true,
      description: "The input (any JSON, null included, as POST /v1/decisions takes it); required.",
    })
    state: unknown,
    @Arg("questions", () => JSONObjectScalar, { description: "`{name: question}` as in POST /v1/decisions." })
    questions: unknown,
    @Ctx() ctx: RequestContext,
    @Arg("metadata", () => JSONObjectScalar, { nullable: true }) metadata?: unknown,
    @Arg("maxQueueWaitS", () => Int, { nullable: true }) maxQueueWaitS?: number | null,
  ): Promise<DecisionType> {
    // `state` may be null (DESIGN §3: any JSON); left out, the body has none and the service says 400.
    const body: Record<string, unknown> = { model, questions };
    if (state !== undefined) body.state = state;
    if (metadata != null) body.metadata = metadata;
    if (maxQueueWaitS != null) body.max_queue_wait_s = maxQueueWaitS;
    // Stops (recorded cancelled, charged what was evaluated) when the client leaves, as over REST (review 11b, L2).
    return (await this.decisions.decide(ctx, body, ctx.signal)).body;
  }
}
