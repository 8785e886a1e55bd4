/**
 * Chat messages → prompt tokens for the embedded engine (see `promptFormatter`), built once per
 * generation runtime (`loading.ts`).
 */
import type { LlamaModel } from "node-llama-cpp";
import type { LlamaCppEngineSpec } from "../../../config/catalog.js";
import type { ChatMessage } from "../../engine.js";
import type { NodeLlamaCpp, Prompt } from "./runtime.js";
import {
  type TemplatePromptTools,
  type TemplateToolFormat,
  templateCallSyntax,
  templateFunctions,
  templateHistory,
} from "./template-tools.js";

/** A runtime's prompt format: the formatter, and the template's tool format where it has one. */
export interface PromptFormat {
  /**
   * Chat messages (and, with `tools`, the tools and the history's calls and results in the
   * template's own format, `template-tools.ts`) → prompt tokens.
   */
  format: (messages: ChatMessage[], tools?: TemplatePromptTools) => Prompt;
  /** The text `format` tokenizes (special tokens written out), for tests and logs. */
  text: (messages: ChatMessage[], tools?: TemplatePromptTools) => string;
  /** The chat template's tool format; null where the documented format serves tools. */
  tools: TemplateToolFormat | null;
}

/**
 * The prompt format of `model`. Models whose GGUF carries a chat template (and whose catalog
 * entry does not say `chat_template: none`) go through node-llama-cpp's chat wrapper, with the
 * wrapper's tool format where it has a usable one (`templateCallSyntax`); others get a plain-text
 * prompt: the message texts in order, one per line, and no tool format.
 * @param lib the node-llama-cpp module (its chat wrappers).
 */
export function promptFormatter(lib: NodeLlamaCpp, model: LlamaModel, spec: LlamaCppEngineSpec): PromptFormat {
  const template = (model.fileInfo.metadata as { tokenizer?: { chat_template?: string } }).tokenizer?.chat_template;
  if (spec.chat_template === "auto" && template) {
    const wrapper = lib.resolveChatWrapper(model, { fallbackToOtherWrappersOnJinjaError: true });
    const syntax = templateCallSyntax(wrapper);
    const plain = (text: string) => {
      const special = model.tokenize(text, true);
      const regular = model.tokenize(text, false);
      return special.length === regular.length && special.every((t, i) => t === regular[i]);
    };
    const render = (messages: ChatMessage[], tools?: TemplatePromptTools) => {
      const state = wrapper.generateContextState({
        chatHistory: templateHistory(messages),
        ...(tools && tools.functions.length > 0
          ? { availableFunctions: templateFunctions(tools.functions), documentFunctionParams: true }
          : {}),
      });
      const { call, parallelism } = wrapper.settings.functions;
      // A forced call starts in the prompt: the section prefix of parallel calls, then the call prefix.
      const text = tools?.forced
        ? lib.LlamaText([state.contextText, parallelism?.call.sectionPrefix ?? "", call.prefix])
        : state.contextText;
      return { text, stops: state.stopGenerationTriggers };
    };
    return {
      format: (messages, tools) => {
        const { text, stops } = render(messages, tools);
        return { tokens: text.tokenize(model.tokenizer), templateStops: stops };
      },
      text: (messages, tools) => render(messages, tools).text.toString(),
      tools: syntax ? { syntax, plain } : null,
    };
  }
  const plainText = (messages: ChatMessage[]) =>
    messages
      .map((m) => m.content)
      .filter((c) => c.length > 0)
      .join("\n");
  return {
    format: (messages) => ({ tokens: model.tokenize(plainText(messages)), templateStops: [] }),
    text: plainText,
    tools: null,
  };
}
