/**
 * Builds the TypeGraphQL schema from the resolvers, with resolver classes and instances supplied by
 * the application (constructor injection, no global container).
 */
import type { GraphQLSchema } from "graphql";
import { type BuildSchemaOptions, type ContainerType, type PubSub, buildSchema } from "type-graphql";

/**
 * The resolvers a schema is built from, chosen by the caller (`resolvers/index.ts`
 * `schemaResolvers`): this folder holds the GraphQL types and never imports a resolver.
 */
export interface SchemaResolvers {
  /** The resolver classes, in the order type-graphql reads them. */
  classes: BuildSchemaOptions["resolvers"];
  /** One instance per class (looked up by its constructor); a class without one fails the build. */
  instances: Iterable<object>;
}

/**
 * The executable schema of `resolvers`.
 * @param resolvers the classes to read and an instance of each (`resolvers/index.ts`).
 * @param emitSchemaFile path to write `schema.graphql` to (the committed copy), or false.
 * @param pubSub what subscriptions read from (the default refuses to subscribe: schema emission only).
 */
export async function buildGraphqlSchema(
  resolvers: SchemaResolvers,
  emitSchemaFile: string | false = false,
  pubSub: PubSub = noPubSub,
): Promise<GraphQLSchema> {
  const instances = new Map<unknown, unknown>(Array.from(resolvers.instances, (r) => [r.constructor, r]));
  const container: ContainerType = {
    get: (cls) => {
      const instance = instances.get(cls);
      if (!instance) throw new Error(`no resolver instance for ${(cls as { name?: string }).name}`);
      return instance;
    },
  };
  return buildSchema({
    resolvers: resolvers.classes,
    container,
    validate: false,
    pubSub,
    emitSchemaFile: emitSchemaFile ? { path: emitSchemaFile, sortedSchema: true } : false,
  });
}

/** A PubSub for building the schema without serving it: subscribing throws. */
const noPubSub: PubSub = {
  publish: () => undefined,
  subscribe: () => {
    throw new Error("subscriptions are not served by this schema");
  },
};
