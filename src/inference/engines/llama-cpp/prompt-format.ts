/**
 * Chat messages → prompt tokens for the embedded engine (see `promptFormatter`), built once per
 * generation runtime (`loading.ts`).
 */
import type { ChatHistoryItem, LlamaModel } from "node-llama-cpp";
import type { LlamaCppEngineSpec } from "../../../config/catalog.js";
import type { ChatMessage } from "../../engine.js";
import type { NodeLlamaCpp, Prompt } from "./runtime.js";

/**
 * Chat messages → prompt tokens. Models whose GGUF carries a chat template (and whose catalog
 * entry does not say `chat_template: none`) go through node-llama-cpp's chat wrapper; others get
 * a plain-text prompt: the message texts in order, one per line.
 * @param lib the node-llama-cpp module (its chat wrappers).
 */
export function promptFormatter(
  lib: NodeLlamaCpp,
  model: LlamaModel,
  spec: LlamaCppEngineSpec,
): (messages: ChatMessage[]) => Prompt {
  const template = (model.fileInfo.metadata as { tokenizer?: { chat_template?: string } }).tokenizer?.chat_template;
  if (spec.chat_template === "auto" && template) {
    const wrapper = lib.resolveChatWrapper(model, { fallbackToOtherWrappersOnJinjaError: true });
    return (messages) => {
      const history: ChatHistoryItem[] = messages.map((m): ChatHistoryItem => {
        if (m.role === "system" || m.role === "developer") return { type: "system", text: m.content };
        if (m.role === "assistant") return { type: "model", response: [m.content] };
        return { type: "user", text: m.content };
      });
      history.push({ type: "model", response: [] });
      const state = wrapper.generateContextState({ chatHistory: history });
      return { tokens: state.contextText.tokenize(model.tokenizer), templateStops: state.stopGenerationTriggers };
    };
  }
  return (messages) => ({
    tokens: model.tokenize(
      messages
        .map((m) => m.content)
        .filter((c) => c.length > 0)
        .join("\n"),
    ),
    templateStops: [],
  });
}
