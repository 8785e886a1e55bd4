/**
 * What a batch item may ask for and how it runs (issue 7, items 1–2; DESIGN §3 Batches): each
 * item is validated at create time with the same schema as its synchronous endpoint, Responses
 * bodies are converted to chat, and at run time an item goes through the same protocol
 * translation and `InferenceService` call as the synchronous endpoint (same credit reservation,
 * metering, activity record and completion event), marked as a batch item.
 */
import { z } from "zod";
import { AppError, type FieldIssue, assertUnreachable, zodIssues } from "../../shared/errors.js";
import type { ChatMessage } from "../../inference/engine.js";
import type { RequestContext } from "../platform/context.js";
import type { FailureRecord } from "../inference/inference-calls.js";
import type { InferenceService } from "../inference/inference.service.js";
import type { ModelCatalogService } from "../models/model-catalog.service.js";
import { PG_TEXT_MESSAGE, isPgStorableText } from "../platform/validation.js";
import { messagesRequest } from "../inference/protocols/anthropic-messages.protocol.js";
import { chatCompletionRequest } from "../inference/protocols/openai-chat.protocol.js";
import { embeddingRequest } from "../inference/protocols/openai-embeddings.protocol.js";
import {
  continuedMessages,
  responseMessages,
  responseRequest,
} from "../inference/protocols/openai-responses.protocol.js";
import { createDecision, prepareDecision } from "../decisions/decisions.service.js";
import { checkChatCompletion, createChatCompletion } from "../inference/use-cases/chat-completion.js";
import { checkEmbedding, createEmbedding } from "../inference/use-cases/embedding.js";
import { checkMessage, createMessage } from "../inference/use-cases/message.js";
import { type ConversationReader, checkResponse } from "../inference/use-cases/response.js";

/** The operations an item runs as, once converted (Responses bodies run as chat). */
export type BatchItemUrl = "/v1/chat/completions" | "/v1/embeddings" | "/v1/messages" | "/v1/decisions";

/** `url` values an item may name (DESIGN §3 Batches). */
export const BATCH_ITEM_URLS = [
  "/v1/chat/completions",
  "/v1/responses",
  "/v1/embeddings",
  "/v1/messages",
  "/v1/decisions",
] as const;

/** Longest `custom_id`, characters. */
export const MAX_CUSTOM_ID_CHARS = 512;

/** How long an item waits for an engine slot before it is put back and retried, seconds. */
const ITEM_QUEUE_WAIT_S = 60;

/** One item of a batch create (`requests[i]`): validated one by one as the body is scanned. */
export const itemShape = z
  .object({
    custom_id: z.string().max(MAX_CUSTOM_ID_CHARS).nullish(),
    url: z.string().nullish(),
    method: z.string().nullish(),
    body: z.record(z.string(), z.unknown(), { error: "must be an object" }),
  })
  .loose();

/** An item as stored: what runs, converted. */
export interface PreparedItem {
  customId: string | null;
  url: BatchItemUrl;
  /** The operation's request body (for `/v1/responses` items, the chat body it became). */
  body: Record<string, unknown>;
  /**
   * A `/v1/responses` item with `previous_response_id`: the batch create reads that conversation
   * (`ResponsesService.conversation`, for the batch's team) and stores `withHistory(it)` as the body.
   */
  continues?: {
    previousResponseId: string;
    /** The item's body field (`requests[i].body`): issues are named under it. */
    bodyPrefix: string;
    /** @throws AppError 400 when the tool turns of the conversation and the input do not pair (`continuedMessages`). */
    withHistory: (history: ChatMessage[]) => Record<string, unknown>;
  };
}

/** An item's problem as the 400 lists it: the field, and the item's `custom_id`. */
export interface ItemIssue extends FieldIssue {
  custom_id: string | null;
}

/**
 * Validates one item (`requests[index]`) and converts it to what it runs as.
 * @returns the prepared item, or every issue found in it (fields prefixed `requests[i]`).
 */
export function prepareBatchItem(
  catalog: ModelCatalogService,
  /** The batch's team: whose custom models and deployments the items may name. */
  teamId: string,
  raw: unknown,
  index: number,
): { item: PreparedItem } | { issues: ItemIssue[] } {
  const prefix = `requests[${index}]`;
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) {
    return { issues: [{ field: prefix, message: "must be an object with a body", custom_id: null }] };
  }
  const shape = itemShape.safeParse(raw);
  const rawCustomId = (raw as { custom_id?: unknown } | null)?.custom_id;
  // Echoed in every issue of the item: only when it is a valid one (a 4 MB custom_id in 50 issues
  // would make a 200 MB answer).
  const customId =
    typeof rawCustomId === "string" && rawCustomId.length <= MAX_CUSTOM_ID_CHARS && isPgStorableText(rawCustomId)
      ? rawCustomId
      : null;
  const issue = (field: string, message: string): ItemIssue => ({ field, message, custom_id: customId });
  if (!shape.success) {
    return { issues: zodIssues(shape.error, prefix + ".").map((i) => ({ ...i, custom_id: customId })) };
  }
  if (typeof rawCustomId === "string" && customId === null && rawCustomId.length <= MAX_CUSTOM_ID_CHARS) {
    return { issues: [issue(`${prefix}.custom_id`, PG_TEXT_MESSAGE)] };
  }
  const { body, url } = shape.data;
  const bodyPrefix = `${prefix}.body`;
  const issues: ItemIssue[] = [];
  if (shape.data.method != null && shape.data.method.toUpperCase() !== "POST") {
    issues.push(issue(`${prefix}.method`, "must be POST"));
  }
  if (body.background === true) issues.push(issue(`${bodyPrefix}.background`, "is not allowed in a batch"));
  if (body.stream === true) issues.push(issue(`${bodyPrefix}.stream`, "is not allowed in a batch"));
  if (url != null && !(BATCH_ITEM_URLS as readonly string[]).includes(url)) {
    issues.push(issue(`${prefix}.url`, `must be one of ${BATCH_ITEM_URLS.join(", ")}`));
    return { issues };
  }
  const target = (url ?? inferUrl(catalog, teamId, body)) as (typeof BATCH_ITEM_URLS)[number];
  const fail = (found: FieldIssue[]) => ({
    issues: [...issues, ...found.map((i) => ({ ...i, custom_id: customId }))],
  });
  const modelIssue = (id: string, modality: "text_generation" | "text_embedding"): FieldIssue[] => {
    try {
      catalog.resolve(teamId, id, modality);
      return [];
    } catch (err) {
      if (err instanceof AppError) return [{ field: `${bodyPrefix}.model`, message: err.detail }];
      throw err;
    }
  };
  /** The synchronous endpoint's own checks (its use case's `check…`), once the model resolves, as item issues. */
  const checked = (model: string, modality: "text_generation" | "text_embedding", check: () => void) => {
    const found = modelIssue(model, modality);
    return found.length > 0 ? found : issuesOf(check, bodyPrefix);
  };
  switch (target) {
    case "/v1/chat/completions": {
      const parsed = chatCompletionRequest.safeParse(body);
      if (!parsed.success) return fail(zodIssues(parsed.error, bodyPrefix + "."));
      const found = checked(parsed.data.model, "text_generation", () =>
        checkChatCompletion(catalog, teamId, parsed.data),
      );
      if (issues.length + found.length > 0) return fail(found);
      return { item: { customId, url: target, body } };
    }
    case "/v1/responses": {
      const parsed = responseRequest.safeParse(body);
      if (!parsed.success) return fail(zodIssues(parsed.error, bodyPrefix + "."));
      const found = checked(parsed.data.model, "text_generation", () => checkResponse(catalog, teamId, parsed.data));
      if (issues.length + found.length > 0) return fail(found);
      const translated = responseMessages(parsed.data);
      const request = parsed.data;
      const item: PreparedItem = {
        customId,
        url: "/v1/chat/completions",
        body: responsesToChat(request, translated.messages),
      };
      if (request.previous_response_id) {
        // The conversation is read by the batch create (`continues`), then put before the input.
        item.continues = {
          previousResponseId: request.previous_response_id,
          bodyPrefix,
          withHistory: (history) => responsesToChat(request, continuedMessages(request, translated, history)),
        };
      }
      return { item };
    }
    case "/v1/embeddings": {
      const parsed = embeddingRequest.safeParse(body);
      if (!parsed.success) return fail(zodIssues(parsed.error, bodyPrefix + "."));
      const found = checked(parsed.data.model, "text_embedding", () => checkEmbedding(catalog, teamId, parsed.data));
      if (issues.length + found.length > 0) return fail(found);
      return { item: { customId, url: target, body } };
    }
    case "/v1/messages": {
      const parsed = messagesRequest.safeParse(body);
      if (!parsed.success) return fail(zodIssues(parsed.error, bodyPrefix + "."));
      const found = checked(parsed.data.model, "text_generation", () => checkMessage(catalog, teamId, parsed.data));
      if (issues.length + found.length > 0) return fail(found);
      return { item: { customId, url: target, body } };
    }
    case "/v1/decisions": {
      // The synchronous endpoint's checks (issue 11, item 5): schema, 1 MiB, a decision-capable model.
      const found = issuesOf(() => prepareDecision(catalog, teamId, body), bodyPrefix);
      if (issues.length + found.length > 0) return fail(found);
      return { item: { customId, url: target, body } };
    }
  }
  return assertUnreachable(target);
}

/** Without `url`: chat for `messages`, embeddings for `input` to an embedding model, else Responses. */
function inferUrl(
  catalog: ModelCatalogService,
  teamId: string,
  body: Record<string, unknown>,
): (typeof BATCH_ITEM_URLS)[number] {
  if (body.messages !== undefined) return "/v1/chat/completions";
  if (body.input !== undefined) {
    const model = typeof body.model === "string" ? catalog.find(teamId, body.model) : undefined;
    return model?.modality === "text_embedding" ? "/v1/embeddings" : "/v1/responses";
  }
  return "/v1/chat/completions";
}

/**
 * What a check throws, as item issues: each field it names under the item's body prefix, or the
 * body itself when it names none.
 */
function issuesOf(check: () => void, bodyPrefix: string): FieldIssue[] {
  try {
    check();
    return [];
  } catch (err) {
    if (!(err instanceof AppError)) throw err;
    const named = (Array.isArray(err.extra) ? err.extra : [err.extra]) as Array<Partial<FieldIssue> | undefined>;
    return named.every((i) => typeof i?.field === "string")
      ? named.map((i) => ({ field: `${bodyPrefix}.${i!.field}`, message: i!.message ?? err.detail }))
      : [{ field: bodyPrefix, message: err.detail }];
  }
}

/**
 * A Responses body as the chat body it runs as (issue 7, item 1: converted at create time), with
 * what it asks for carried over (issue 26, item 5): function tools and `tool_choice`, earlier calls
 * and their outputs as `tool_calls` / `tool` messages, `text.format` as `response_format`, and
 * `include: ["message.output_text.logprobs"]` / `top_logprobs` as `logprobs` / `top_logprobs`.
 */
function responsesToChat(req: z.infer<typeof responseRequest>, messages: ChatMessage[]): Record<string, unknown> {
  const chat: Record<string, unknown> = { model: req.model, messages: messages.map(chatWireMessage) };
  if (req.max_output_tokens != null) chat.max_tokens = req.max_output_tokens;
  if (req.temperature != null) chat.temperature = req.temperature;
  if (req.top_p != null) chat.top_p = req.top_p;
  if (req.metadata != null) chat.metadata = req.metadata;
  const format = req.text?.format;
  if (format?.type === "json_object") chat.response_format = { type: "json_object" };
  if (format?.type === "json_schema") {
    const { name, description, schema, strict } = format;
    chat.response_format = { type: "json_schema", json_schema: { name, description, schema, strict } };
  }
  const tools = (req.tools ?? []).flatMap((t) =>
    t.type === "function" && "name" in t
      ? [
          {
            type: "function",
            function: { name: t.name, description: t.description, parameters: t.parameters, strict: t.strict },
          },
        ]
      : [],
  );
  if (tools.length > 0) chat.tools = tools;
  const choice = req.tool_choice;
  if (choice != null)
    chat.tool_choice = typeof choice === "string" ? choice : { type: "function", function: { name: choice.name } };
  if (req.parallel_tool_calls != null) chat.parallel_tool_calls = req.parallel_tool_calls;
  const top = req.top_logprobs ?? 0;
  if ((req.include ?? []).includes("message.output_text.logprobs") || top > 0) {
    chat.logprobs = true;
    if (top > 0) chat.top_logprobs = top;
  }
  return chat;
}

/** A translated message as a chat body writes it (an assistant's calls as `tool_calls`, a tool turn's call id). */
function chatWireMessage(m: ChatMessage): Record<string, unknown> {
  if (m.role === "tool") return { role: "tool", content: m.content, tool_call_id: m.toolCallId ?? "" };
  if (m.role === "assistant" && m.toolCalls?.length) {
    return {
      role: "assistant",
      content: m.content || null,
      tool_calls: m.toolCalls.map((c) => ({
        id: c.id,
        type: "function",
        function: { name: c.name, arguments: c.arguments },
      })),
    };
  }
  return { role: m.role, content: m.content };
}

/**
 * A `/v1/responses` item that continues a stored response (`previous_response_id`; issue 26,
 * item 5): its body with that conversation before its input, read now for the batch's team, so
 * the item runs as sent even if the stored response is deleted later. An unknown or another
 * team's id, or one that cannot be continued, is an issue of the item (null returned), and so is
 * a tool history that does not pair with the conversation's (named under the item's body).
 */
export async function withConversation(
  conversations: ConversationReader,
  ctx: RequestContext,
  item: PreparedItem,
  issues: ItemIssue[],
): Promise<PreparedItem | null> {
  if (!item.continues) return item;
  const { previousResponseId, bodyPrefix, withHistory } = item.continues;
  let history: ChatMessage[];
  try {
    history = await conversations.conversation(ctx, previousResponseId);
  } catch (err) {
    if (!(err instanceof AppError)) throw err;
    issues.push({ field: `${bodyPrefix}.previous_response_id`, message: err.detail, custom_id: item.customId });
    return null;
  }
  let body: Record<string, unknown> = item.body;
  const found = issuesOf(() => (body = withHistory(history)), bodyPrefix);
  issues.push(...found.map((i) => ({ ...i, custom_id: item.customId })));
  return found.length > 0 ? null : { customId: item.customId, url: item.url, body };
}

/** One item as the runner hands it over. */
export interface RunnableItem {
  /** Activity id and ledger source, fixed at create. */
  requestId: string;
  batchId: string;
  customId: string | null;
  url: BatchItemUrl;
  body: Record<string, unknown>;
}

/**
 * Runs one item through the synchronous endpoint's path and records it (activity `type: batch`).
 * Resolves once the record is committed; `onEngineDone` is called before, once the engine's part
 * succeeded (see `InferenceCall.batch`).
 * @throws what the call throws: AppError 429 / client_closed when `onFailure` chose not to record
 *   (the runner retries the item), or the recorded failure's error; AppError 400 when the stored
 *   body no longer validates (e.g. its model left the catalog) — not recorded, the runner ends the
 *   item itself.
 */
export async function runBatchItem(
  inference: InferenceService,
  catalog: ModelCatalogService,
  ctx: RequestContext,
  item: RunnableItem,
  signal: AbortSignal,
  onFailure: (err: unknown) => FailureRecord | null,
  onEngineDone?: () => void,
): Promise<void> {
  const ops = { inference, catalog };
  const common = {
    requestId: item.requestId,
    rawBody: item.body,
    maxQueueWaitS: ITEM_QUEUE_WAIT_S,
    signal,
    batch: { batchId: item.batchId, customId: item.customId, onFailure, onEngineDone },
  };
  switch (item.url) {
    case "/v1/chat/completions":
      await createChatCompletion(ops, ctx, chatCompletionRequest.parse(item.body), common);
      return;
    case "/v1/messages":
      await createMessage(ops, ctx, messagesRequest.parse(item.body), common);
      return;
    case "/v1/embeddings":
      await createEmbedding(ops, ctx, embeddingRequest.parse(item.body), common);
      return;
    case "/v1/decisions":
      await createDecision(ops, ctx, item.body, common);
      return;
  }
}
