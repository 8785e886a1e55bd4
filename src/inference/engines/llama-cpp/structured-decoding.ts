/**
 * Structured outputs on the embedded engine (issue 26, item 1): a response format becomes a GBNF
 * grammar (`structured/json-schema-gbnf.ts`) that llama.cpp's sampler enforces token by token, so
 * an answer that ends with the model's own stop is JSON that validates against the schema. A
 * strict schema using a keyword the grammar cannot enforce is refused before admission (400, no
 * charge); a non-strict one is decoded without that keyword, as OpenAI does outside strict mode.
 */
import type { Llama, LlamaGrammar } from "node-llama-cpp";
import { AppError } from "../../../shared/errors.js";
import type { ResponseFormat } from "../../engine.js";
import { jsonObjectGrammar, jsonSchemaGrammar, schemaIssueField } from "../../structured/json-schema-gbnf.js";

/** Compiled grammars kept per process (schemas repeat: one per application and call site). */
const CACHE_SIZE = 64;

/** The request field a response format's schema came from (`response_format` for `json_object`). */
function formatField(format: ResponseFormat): string {
  return format.type === "json_schema" ? format.field : "response_format";
}

/**
 * The GBNF of a response format.
 * @throws AppError 400 naming each keyword the grammar cannot enforce (`<field>.properties.x.pattern`)
 *   and the model: under `strict`, every one; whatever `strict` says, a fatal one (a `$ref` cycle
 *   that reads no input, review finding F3), which no grammar can decode.
 */
export function formatGrammar(format: ResponseFormat, modelId: string): string {
  if (format.type === "json_object") return jsonObjectGrammar();
  const { gbnf, issues } = jsonSchemaGrammar(format.schema);
  const refused = format.strict ? issues : issues.filter((i) => i.fatal);
  if (refused.length > 0) {
    const first = refused[0];
    const where = schemaIssueField(format.field, first.path);
    throw AppError.invalid(
      first.fatal
        ? `Model '${modelId}' cannot decode the schema at ${where}: ${first.message}`
        : `Model '${modelId}' cannot enforce \`${first.keyword}\` (at ${where}) while ` +
            `decoding; strict: true needs every keyword enforced (see the README's structured-output subset), ` +
            `or send strict: false to decode without it`,
      refused.map((i) => ({ field: schemaIssueField(format.field, i.path), message: i.message })),
    );
  }
  return gbnf;
}

/** Grammars compiled once per GBNF text, the least recently used dropped past `CACHE_SIZE`. */
export class GrammarCache {
  private readonly grammars = new Map<string, Promise<LlamaGrammar>>();

  constructor(private readonly llama: () => Promise<Llama>) {}

  /**
   * The compiled grammar of `format` (`formatGrammar`).
   * @throws AppError 400 as `formatGrammar` and `compile` do.
   */
  forFormat(format: ResponseFormat, modelId: string): Promise<LlamaGrammar> {
    return this.compile(formatGrammar(format, modelId), formatField(format), modelId);
  }

  /**
   * The compiled grammar of `gbnf`, made from the schema at `field`.
   * @throws AppError 400 naming `field` when llama.cpp cannot compile it (review finding F3: a
   *   grammar it refuses is the schema's fault, never a 500).
   */
  async compile(gbnf: string, field: string, modelId: string): Promise<LlamaGrammar> {
    await this.llama(); // llama.cpp itself failing to start is not the schema's fault
    try {
      return await this.get(gbnf);
    } catch (err) {
      throw AppError.invalid(
        `Model '${modelId}' cannot decode under the schema at ${field}: its grammar does not compile`,
        [{ field, message: `llama.cpp refused its grammar (${err instanceof Error ? err.message : String(err)})` }],
      );
    }
  }

  /** The compiled grammar of `gbnf`. @throws what llama.cpp throws for a grammar it cannot parse. */
  get(gbnf: string): Promise<LlamaGrammar> {
    const known = this.grammars.get(gbnf);
    if (known) {
      this.grammars.delete(gbnf);
      this.grammars.set(gbnf, known);
      return known;
    }
    const made = this.llama().then((llama) => llama.createGrammar({ grammar: gbnf }));
    made.catch(() => this.grammars.delete(gbnf));
    this.grammars.set(gbnf, made);
    if (this.grammars.size > CACHE_SIZE) this.grammars.delete(this.grammars.keys().next().value!);
    return made;
  }
}
