/**
 * GraphQL request limits (issue 5, item 1): no single GraphQL document may stall the event loop,
 * whether it arrives over HTTP (Apollo) or graphql-ws. Every document passes, in this order,
 *
 * 1. a size cap in characters, before anything reads it;
 * 2. graphql-js `parse` with `maxTokens`, so parsing (and its recursion) stays bounded;
 * 3. a shape check over the parsed document — nesting depth, aliases and field selections, with
 *    fragments expanded (memoised, cycle-safe) — that keeps graphql-js's own validation rules
 *    from looking at a document that fails it, because some of them cost more than linear time
 *    (OverlappingFieldsCanBeMerged compares selections pairwise: 400 repeated `me { id }` took
 *    ~150 ms to validate, 800 fragment-chained ones ~500 ms), so a document must be known to be
 *    small before they see it;
 * 4. the specified validation rules.
 *
 * The shape check is written here rather than taken from `@escape.tech/graphql-armor`: armor's
 * rules report at `OperationDefinition` and let the specified rules run on (too late, see 3), its
 * alias rule does not count `__typename` aliases by default (the 700k-alias probe used them), its
 * typings pull in `@envelop/core` and six sibling packages, and a single pass here computes all
 * three measures for both transports.
 *
 * Every refusal is a `GraphQLError` with code `GRAPHQL_PARSE_FAILED`, `GRAPHQL_VALIDATION_FAILED`
 * or `BAD_REQUEST` and HTTP status 400 (`extensions.http`), so `formatGraphqlError` reports it
 * as a 400 with its real message on both transports.
 */
import type { RequestHandler } from "express";
import {
  type DocumentNode,
  type FragmentDefinitionNode,
  GraphQLError,
  type GraphQLSchema,
  Kind,
  type SelectionSetNode,
  type ValidationRule,
  parse,
  specifiedRules,
  validate,
} from "graphql";

/** Bounds on one GraphQL document; see the module header for when each applies. */
export interface GraphqlLimits {
  /** Longest accepted document, in UTF-16 code units (JavaScript string length). */
  maxDocumentChars: number;
  /** Most lexer tokens the parser reads before refusing (graphql-js `parse` option `maxTokens`). */
  maxTokens: number;
  /** Deepest field nesting, fragments expanded; `{ me { id } }` is 2 deep. */
  maxDepth: number;
  /** Most aliased fields per operation or fragment, fragments expanded (`__typename` included). */
  maxAliases: number;
  /** Most field selections per operation or fragment, fragments expanded. */
  maxFields: number;
}

/**
 * The limits in force. Sized so the full introspection query of graphql-js
 * (`getIntrospectionQuery` with every option: ~2 KB, ~190 tokens, 15 deep, 230 fields after
 * expansion) passes with room, while the worst document that passes validates in ~30 ms
 * (300 repeated `me { id }`-style selections).
 */
export const DEFAULT_GRAPHQL_LIMITS: GraphqlLimits = {
  maxDocumentChars: 32 * 1024,
  maxTokens: 2_000,
  maxDepth: 20,
  maxAliases: 30,
  maxFields: 300,
};

/** Depth, aliases and fields of a selection set with its fragments expanded. */
export interface DocumentShape {
  depth: number;
  aliases: number;
  fields: number;
}

const EMPTY: DocumentShape = { depth: 0, aliases: 0, fields: 0 };

/** A 400 request error in Apollo's shape (`extensions.code`, `extensions.http.status`). */
function requestError(message: string, code: string): GraphQLError {
  return new GraphQLError(message, { extensions: { code, http: { status: 400 } } });
}

/**
 * Measures every operation and fragment definition of `document`, fragments expanded.
 * A fragment met again while being expanded (a cycle, refused later by NoFragmentCycles) and an
 * unknown fragment (refused by KnownFragmentNames) count as empty. Linear in the document size:
 * each fragment is measured once. Counts can exceed 2^53 for nested fragment fan-out; they only
 * need to compare greater than a limit.
 * @returns one entry per executable definition, named `Operation "x"`, `Anonymous operation` or
 *   `Fragment "x"`.
 */
export function measureDocument(document: DocumentNode): Array<{ definition: string; shape: DocumentShape }> {
  const fragments = new Map<string, FragmentDefinitionNode>();
  for (const def of document.definitions) if (def.kind === Kind.FRAGMENT_DEFINITION) fragments.set(def.name.value, def);
  const measured = new Map<string, DocumentShape>();
  const expanding = new Set<string>();

  const fragment = (name: string): DocumentShape => {
    const known = measured.get(name);
    if (known) return known;
    const def = fragments.get(name);
    if (!def || expanding.has(name)) return EMPTY;
    expanding.add(name);
    const shape = selectionSet(def.selectionSet);
    expanding.delete(name);
    measured.set(name, shape);
    return shape;
  };
  const selectionSet = (set: SelectionSetNode): DocumentShape => {
    let depth = 0;
    let aliases = 0;
    let fields = 0;
    for (const selection of set.selections) {
      let shape: DocumentShape;
      if (selection.kind === Kind.FIELD) {
        const below = selection.selectionSet ? selectionSet(selection.selectionSet) : EMPTY;
        shape = {
          depth: below.depth + 1,
          aliases: below.aliases + (selection.alias ? 1 : 0),
          fields: below.fields + 1,
        };
      } else if (selection.kind === Kind.INLINE_FRAGMENT) {
        shape = selectionSet(selection.selectionSet);
      } else {
        shape = fragment(selection.name.value);
      }
      depth = Math.max(depth, shape.depth);
      aliases += shape.aliases;
      fields += shape.fields;
    }
    return { depth, aliases, fields };
  };

  const out: Array<{ definition: string; shape: DocumentShape }> = [];
  for (const def of document.definitions) {
    if (def.kind === Kind.OPERATION_DEFINITION) {
      const definition = def.name ? `Operation "${def.name.value}"` : "Anonymous operation";
      out.push({ definition, shape: selectionSet(def.selectionSet) });
    } else if (def.kind === Kind.FRAGMENT_DEFINITION) {
      out.push({ definition: `Fragment "${def.name.value}"`, shape: fragment(def.name.value) });
    }
  }
  return out;
}

/**
 * The shape check (step 3): at most one error per exceeded limit (depth, aliases, fields), naming
 * the first definition, in document order, that exceeds it.
 * @returns `GRAPHQL_VALIDATION_FAILED` errors (HTTP 400); empty when the document is within limits.
 */
export function shapeErrors(document: DocumentNode, limits: GraphqlLimits = DEFAULT_GRAPHQL_LIMITS): GraphQLError[] {
  const found = new Map<keyof DocumentShape, string>();
  for (const { definition, shape } of measureDocument(document)) {
    if (shape.depth > limits.maxDepth && !found.has("depth")) {
      found.set("depth", `${definition} is nested ${shape.depth} fields deep; the limit is ${limits.maxDepth}`);
    }
    if (shape.aliases > limits.maxAliases && !found.has("aliases")) {
      found.set("aliases", `${definition} uses ${shape.aliases} aliases; the limit is ${limits.maxAliases}`);
    }
    if (shape.fields > limits.maxFields && !found.has("fields")) {
      found.set(
        "fields",
        `${definition} selects ${shape.fields} fields (fragments expanded); the limit is ${limits.maxFields}`,
      );
    }
  }
  return [...found.values()].map((message) => requestError(message, "GRAPHQL_VALIDATION_FAILED"));
}

/**
 * Steps 1 and 2: the size cap, then `parse` with `maxTokens`.
 * @returns the document, or the errors to answer with (`BAD_REQUEST` for size,
 *   `GRAPHQL_PARSE_FAILED` for syntax and token count; HTTP 400).
 */
export function parseWithinLimits(
  source: string,
  limits: GraphqlLimits = DEFAULT_GRAPHQL_LIMITS,
): { document: DocumentNode } | { errors: GraphQLError[] } {
  const tooLarge = sizeError(source, limits);
  if (tooLarge) return { errors: [tooLarge] };
  try {
    return { document: parse(source, { maxTokens: limits.maxTokens }) };
  } catch (err) {
    if (!(err instanceof GraphQLError)) throw err;
    return {
      errors: [
        new GraphQLError(err.message, {
          nodes: err.nodes,
          source: err.source,
          positions: err.positions,
          extensions: { code: "GRAPHQL_PARSE_FAILED", http: { status: 400 } },
        }),
      ],
    };
  }
}

function sizeError(source: string, limits: GraphqlLimits): GraphQLError | undefined {
  if (source.length <= limits.maxDocumentChars) return undefined;
  return requestError(
    `GraphQL document too large: ${source.length} characters; the limit is ${limits.maxDocumentChars}`,
    "BAD_REQUEST",
  );
}

/**
 * The shape check as a validation rule to list *after* the specified rules (Apollo appends its
 * `validationRules` to them). It acts when the `Document` is entered, before any rule has looked
 * past the list of definitions: within limits it does nothing; otherwise it reports the shape
 * errors and removes the document from the traversal (an `enter` returning `null`), so no rule
 * visits any part of it — graphql-js runs rules in parallel over one traversal, and a node a
 * visitor removes is seen by no one after it.
 */
export function shapeLimitRule(limits: GraphqlLimits = DEFAULT_GRAPHQL_LIMITS): ValidationRule {
  return (context) => ({
    Document: {
      enter(document) {
        const errors = shapeErrors(document, limits);
        if (errors.length === 0) return undefined;
        for (const error of errors) context.reportError(error);
        return null;
      },
    },
  });
}

/**
 * All four steps, for transports that run GraphQL themselves (graphql-ws).
 * @returns the validated document, or the errors to answer with (all 400s).
 */
export function prepareDocument(
  schema: GraphQLSchema,
  source: string,
  limits: GraphqlLimits = DEFAULT_GRAPHQL_LIMITS,
): { document: DocumentNode } | { errors: readonly GraphQLError[] } {
  const parsed = parseWithinLimits(source, limits);
  if ("errors" in parsed) return parsed;
  const invalid = validate(schema, parsed.document, [...specifiedRules, shapeLimitRule(limits)]);
  if (invalid.length === 0) return parsed;
  return {
    errors: invalid.map(
      (e) =>
        new GraphQLError(e.message, {
          nodes: e.nodes,
          source: e.source,
          positions: e.positions,
          extensions: { ...e.extensions, code: "GRAPHQL_VALIDATION_FAILED", http: { status: 400 } },
        }),
    ),
  };
}

/**
 * The size cap on HTTP (step 1), as Express middleware after the JSON body parser and before
 * Apollo: a `query` (body, or GET search parameter) longer than `maxDocumentChars` answers 400
 * `BAD_REQUEST` in the GraphQL error format. Steps 2–4 run inside Apollo (`parseOptions.maxTokens`
 * and `shapeLimitRule`, set by the server).
 */
export function graphqlSizeGuard(limits: GraphqlLimits = DEFAULT_GRAPHQL_LIMITS): RequestHandler {
  return (req, res, next) => {
    const body: unknown = req.body;
    const fromBody = typeof body === "object" && body !== null ? (body as { query?: unknown }).query : undefined;
    const query = typeof fromBody === "string" ? fromBody : req.query.query;
    const tooLarge = typeof query === "string" ? sizeError(query, limits) : undefined;
    if (!tooLarge) return next();
    res.status(400).json({
      errors: [{ message: tooLarge.message, extensions: { code: "BAD_REQUEST", status_code: 400, extra: null } }],
    });
  };
}
