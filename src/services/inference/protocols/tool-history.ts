/**
 * The tool turns of a history, checked once for every protocol (issue 26 review, finding 14):
 * over the translated messages (`ChatMessage.toolCalls` / `toolCallId`), so the embedded engine
 * refuses what OpenAI and Anthropic refuse (and what an OpenAI-compatible upstream would refuse
 * behind us) instead of writing a broken history into a prompt. Each protocol names the fields in
 * its own terms (`ToolFields`) and says which of the rules below it keeps (`ToolHistoryRules`):
 * - a call id appears once in a request (OpenAI, Anthropic; Responses' `call_id` too);
 * - an answer names a call made before it: in chat and Messages a call of the assistant turn right
 *   before the answers (OpenAI: "'tool_call_id' … not found in 'tool_calls' of previous message";
 *   Anthropic: "Each `tool_result` block must have a corresponding `tool_use` block in the previous
 *   message"); in Responses any earlier `function_call` (its items may come in any order);
 * - a call is answered: in chat and Messages by the tool turns right after its turn (OpenAI: "An
 *   assistant message with 'tool_calls' must be followed by tool messages responding to each
 *   'tool_call_id'"; Anthropic: each `tool_use` needs a `tool_result` in the next message, results
 *   first); in Responses by a `function_call_output` anywhere after it (OpenAI: "No tool output
 *   found for function call …"). A call in the last turn is refused by chat and Responses, and left
 *   alone by Messages (an assistant prefill; Anthropic's rule there is not documented).
 * Legacy `function` results (a tool turn without an id) are not checked.
 */
import type { ChatMessage } from "../../../inference/engine.js";
import { AppError, type FieldIssue } from "../../../shared/errors.js";

/** Where a translated message's tool parts are in the caller's body (400s name them). */
export interface ToolPartFields {
  /** The field of each call's id, in `toolCalls` order (`messages[1].tool_calls[0].id`). */
  calls: string[];
  /** The field of a tool turn's `toolCallId` (`messages[2].tool_call_id`). */
  answer?: string;
}

/** The fields of each translated message that has tool parts (keyed by the message itself). */
export type ToolFields = Map<ChatMessage, ToolPartFields>;

/** A protocol body's messages as the engines get them, with what could not be read and where the tool parts are. */
export interface TranslatedMessages {
  messages: ChatMessage[];
  /** Fields of content the model cannot read (the caller answers 400). */
  unsupported: string[];
  toolFields: ToolFields;
}

/** How a protocol pairs calls and answers, and the words its 400s use. */
export interface ToolHistoryRules {
  /**
   * `next`: the answers come right after the turn that made the calls and answer only its calls;
   * `later`: an answer follows its call anywhere after it.
   */
  answered: "next" | "later";
  /** A call in the history's last turn must be answered too (false: left alone). */
  atEnd: boolean;
  /** The protocol's name for a call (`tool call`, `tool_use`, `function_call`) and for an answer. */
  call: string;
  answer: string;
  /** The field named for tool parts that did not come from the body (a previous response's). */
  outside: string;
}

/** OpenAI Chat Completions: `tool` messages right after the assistant message with `tool_calls`. */
export const CHAT_TOOL_RULES: ToolHistoryRules = {
  answered: "next",
  atEnd: true,
  call: "tool call",
  answer: "tool message",
  outside: "messages",
};

/** Anthropic Messages: `tool_result` blocks in the user message after the `tool_use` blocks' one. */
export const MESSAGES_TOOL_RULES: ToolHistoryRules = {
  answered: "next",
  atEnd: false,
  call: "tool_use",
  answer: "tool_result",
  outside: "messages",
};

/** OpenAI Responses: a `function_call_output` after its `function_call`, the conversation continued included. */
export const RESPONSES_TOOL_RULES: ToolHistoryRules = {
  answered: "later",
  atEnd: true,
  call: "function_call",
  answer: "function_call_output",
  outside: "previous_response_id",
};

/**
 * Checks the tool turns of `messages` (see the module header).
 * @param fields where each message's tool parts are in the body; a message without an entry came
 *   from elsewhere (`rules.outside` is named).
 * @throws AppError 400 naming every call or answer that breaks a rule, in the caller's terms.
 */
export function checkToolHistory(messages: ChatMessage[], fields: ToolFields, rules: ToolHistoryRules): void {
  const issues: FieldIssue[] = [];
  const seen = new Set<string>();
  // Calls not answered yet, by id, with the field of each.
  const open = new Map<string, string>();
  // `next`: the calls of the assistant turn the current answers follow (null: answers are not expected).
  let latest: Set<string> | null = null;
  const unanswered = () => {
    for (const [id, field] of open) {
      const where = rules.answered === "next" ? `in the message after it` : `after it`;
      issues.push({ field, message: `${rules.call} ${id} has no ${rules.answer} answering it ${where}` });
    }
    open.clear();
  };
  for (const m of messages) {
    const at = fields.get(m);
    if (m.role === "tool") {
      const id = m.toolCallId;
      if (id === undefined) continue;
      const field = at?.answer ?? rules.outside;
      if (rules.answered === "next" ? !latest?.has(id) : !seen.has(id)) {
        const which =
          rules.answered === "next" ? `no ${rules.call} of the message before it` : `no earlier ${rules.call}`;
        issues.push({ field, message: `answers ${which} (${id})` });
      }
      open.delete(id);
      continue;
    }
    if (rules.answered === "next") {
      unanswered();
      latest = null;
    }
    for (const [j, call] of (m.toolCalls ?? []).entries()) {
      const field = at?.calls[j] ?? rules.outside;
      if (seen.has(call.id)) issues.push({ field, message: `repeats the id of an earlier ${rules.call} (${call.id})` });
      seen.add(call.id);
      open.set(call.id, field);
      if (rules.answered === "next") (latest ??= new Set()).add(call.id);
    }
  }
  if (rules.atEnd) unanswered();
  if (issues.length === 0) return;
  throw AppError.invalid(`Invalid tool history: ${issues[0].field} ${issues[0].message}`, issues);
}
