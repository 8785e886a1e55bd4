/**
 * The `JSONObject` GraphQL scalar: a free-form JSON value, served as stored (completion events'
 * `result` and `error`, activity bodies). Here, below every layer, so entities that are GraphQL
 * types can use it.
 */
import { GraphQLScalarType, Kind, type ValueNode } from "graphql";

function literalValue(node: ValueNode): unknown {
  switch (node.kind) {
    case Kind.STRING:
    case Kind.BOOLEAN:
      return node.value;
    case Kind.INT:
    case Kind.FLOAT:
      return Number(node.value);
    case Kind.OBJECT:
      return Object.fromEntries(node.fields.map((f) => [f.name.value, literalValue(f.value)]));
    case Kind.LIST:
      return node.values.map(literalValue);
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
  parseLiteral: literalValue,
});
