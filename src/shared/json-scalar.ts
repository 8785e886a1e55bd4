/**
 * The `JSONObject` GraphQL scalar: a free-form JSON value, served as stored (completion events'
 * `result` and `error`, activity bodies). Here, below every layer, so entities that are GraphQL
 * types can use it.
 */
import { GraphQLScalarType, Kind, type ValueNode } from "graphql";

/**
 * A literal as JSON: objects and lists recursively, `null` as null, and a `$variable` anywhere
 * inside (e.g. `questions: {q: $q}`) as that variable's value (absent: null).
 */
function literalValue(node: ValueNode, variables?: Record<string, unknown> | null): unknown {
  switch (node.kind) {
    case Kind.STRING:
    case Kind.BOOLEAN:
    case Kind.ENUM:
      return node.value;
    case Kind.INT:
    case Kind.FLOAT:
      return Number(node.value);
    case Kind.OBJECT:
      return Object.fromEntries(node.fields.map((f) => [f.name.value, literalValue(f.value, variables)]));
    case Kind.LIST:
      return node.values.map((v) => literalValue(v, variables));
    case Kind.VARIABLE:
      return variables?.[node.name.value] ?? null;
    default:
      return null;
  }
}

/** Any JSON value, as it was stored (output only in this schema). */
export const JSONObjectScalar = new GraphQLScalarType({
  name: "JSONObject",
  description: "A free-form JSON value.",
  serialize: (value) => value,
  parseValue: (value) => value,
  parseLiteral: (node, variables) => literalValue(node, variables),
});
