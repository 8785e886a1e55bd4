/**
 * Builds the TypeGraphQL schema from the resolvers, with resolver instances supplied by the
 * application (constructor injection, no global container).
 */
import type { GraphQLSchema } from "graphql";
import { type ContainerType, buildSchema } from "type-graphql";
import { ApiKeyResolver } from "../resolvers/api-key.resolver.js";
import { AuthResolver } from "../resolvers/auth.resolver.js";
import { ModelResolver } from "../resolvers/model.resolver.js";
import { TeamResolver } from "../resolvers/team.resolver.js";

/** Resolver instances, also used by the REST table. */
export interface Resolvers {
  auth: AuthResolver;
  apiKeys: ApiKeyResolver;
  models: ModelResolver;
  teams: TeamResolver;
}

export const resolverClasses = [AuthResolver, ApiKeyResolver, ModelResolver, TeamResolver] as const;

/** @param emitSchemaFile path to write `schema.graphql` to (the committed copy), or false. */
export async function buildGraphqlSchema(
  resolvers: Resolvers,
  emitSchemaFile: string | false = false,
): Promise<GraphQLSchema> {
  const instances = new Map<unknown, unknown>(Object.values(resolvers).map((r) => [r.constructor, r]));
  const container: ContainerType = {
    get: (cls) => {
      const instance = instances.get(cls);
      if (!instance) throw new Error(`no resolver instance for ${(cls as { name?: string }).name}`);
      return instance;
    },
  };
  return buildSchema({
    resolvers: resolverClasses,
    container,
    validate: false,
    emitSchemaFile: emitSchemaFile ? { path: emitSchemaFile, sortedSchema: true } : false,
  });
}
