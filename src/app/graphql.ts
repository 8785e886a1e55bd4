/**
 * GraphQL on `/graphql` of the HTTP app: over HTTP (Apollo) and over graphql-ws on the same
 * server, both behind the limits of `schema/graphql-limits.ts` and the same error formatter.
 */
import { randomUUID } from "node:crypto";
import type http from "node:http";
import path from "node:path";
import { ApolloServer } from "@apollo/server";
import { unwrapResolverError } from "@apollo/server/errors";
import { ApolloServerPluginLandingPageDisabled } from "@apollo/server/plugin/disabled";
import { ApolloServerPluginDrainHttpServer } from "@apollo/server/plugin/drainHttpServer";
import { expressMiddleware } from "@as-integrations/express5";
import express, { type Express } from "express";
import { GraphQLError, type GraphQLFormattedError } from "graphql";
import { useServer } from "graphql-ws/use/ws";
import type { Logger } from "pino";
import { WebSocketServer } from "ws";
import { type Config, packageRoot } from "../config/config.js";
import { completionEventsPubSub } from "../resolvers/completion-events.resolver.js";
import { type Resolvers, schemaResolvers } from "../resolvers/index.js";
import { type PresentedCredential, clientIp, presentedCredential, requestOrigin } from "../rest/app.js";
import { graphqlErrorMiddleware } from "../rest/error-envelope.js";
import { mountGraphiql } from "../rest/graphiql.js";
import { abortOnClose } from "../rest/handlers/generation.js";
import { isJsonMediaType, requireJsonMediaType, verifyJsonDepth } from "../rest/json-body.js";
import { buildGraphqlSchema } from "../schema/build-schema.js";
import { formatGraphqlError } from "../schema/error-formatter.js";
import { DEFAULT_GRAPHQL_LIMITS, graphqlSizeGuard, prepareDocument, shapeLimitRule } from "../schema/graphql-limits.js";
import { SocketSessions } from "../services/accounts/socket-sessions.js";
import type { CredentialService } from "../services/accounts/credential.service.js";
import type { CompletionEventsService } from "../services/events/completion-events.service.js";
import type { CacheBus } from "../services/platform/cache-bus.js";
import type { RequestContext } from "../services/platform/context.js";
import { asDatabaseUnavailable } from "../shared/database-errors.js";
import { AppError } from "../shared/errors.js";
import type { Lifecycle } from "./lifecycle.js";

/** WebSocket close code 1013, "Try Again Later" (RFC 6455 registry): the database is unavailable. */
export const SOCKET_TRY_AGAIN_LATER = 1013;

/** The committed `schema.graphql` at the repository root. */
export const SCHEMA_FILE = path.join(packageRoot, "schema.graphql");

/** What GraphQL is served with. */
export interface GraphqlParts {
  config: Config;
  logger: Logger;
  /** The Express app GraphQL is mounted on, and the HTTP server serving it (graphql-ws shares it). */
  app: Express;
  server: http.Server;
  resolvers: Resolvers;
  credentials: CredentialService;
  bus: CacheBus;
  events: CompletionEventsService;
  /** Write the GraphQL schema to this file (development). */
  emitSchemaFile?: string;
}

/**
 * Builds the schema, serves it over graphql-ws and starts Apollo (component "HTTP and GraphQL":
 * its stop drains the HTTP server and closes the sockets), then counts the events feed as started
 * (component "completion events": long-polls and subscriptions end before the HTTP drain waits on
 * them) and mounts `/graphql` on the app, with GraphiQL for browsers (`GET` preferring HTML).
 */
export async function startGraphql(life: Lifecycle, parts: GraphqlParts): Promise<void> {
  const { config, logger, app, server, credentials, bus, events } = parts;
  const limits = DEFAULT_GRAPHQL_LIMITS;
  const schema = await buildGraphqlSchema(
    schemaResolvers(parts.resolvers),
    parts.emitSchemaFile ?? false,
    completionEventsPubSub(events),
  );

  // Refused credentials fail only the operations that need a caller (login works with a stale token).
  const contextFromCredential = async (
    credential: PresentedCredential | undefined,
    requestId: string,
    origin?: string,
    ip?: string,
  ): Promise<RequestContext> => {
    try {
      const principal = await credentials.authenticate(credential?.value, { apiKeyOnly: credential?.apiKeyOnly });
      return { requestId, principal, origin, ip };
    } catch (err) {
      // An unavailable database fails the operations that need a caller with its 503, not the
      // whole request with Apollo's 500 for a failed context (issue 28, item 1).
      const refused = err instanceof AppError ? err : asDatabaseUnavailable(err);
      if (refused) return { requestId, credentialError: refused, origin, ip };
      throw err;
    }
  };

  // graphql-ws: credentials are checked when the socket connects, and a socket that presents
  // refused ones is closed with 4403 (a long-lived subscription should not start on a bad token;
  // over HTTP each request stands alone, so there only operations needing a caller fail). They
  // are checked again for every operation, and a revocation that concerns an open socket (its
  // key revoked, its user removed, moved or reset) closes it with 4403 (`SocketSessions`). Each operation passes the same limits as over HTTP (`prepareDocument`); a refused one
  // gets a graphql-ws `error` message, the socket stays open. Frames above
  // graphqlMaxPayloadBytes close the socket (1009) before they are read. Errors leave through
  // the same formatter as over HTTP.
  // Internal errors leave as an opaque 500; the log keeps what happened (safe fields only).
  // Over HTTP the failure is logged with the request id by the plugin below (issue 13, item 5);
  // over the socket here, where no HTTP request is behind the operation.
  const logInternal = (error: unknown, requestId?: string) =>
    logger.error({ err: unwrapResolverError(error), requestId }, "GraphQL operation failed");
  const formatError = (formatted: GraphQLFormattedError, error: unknown): GraphQLFormattedError =>
    formatGraphqlError(formatted, error);
  const formatSocketError = (formatted: GraphQLFormattedError, error: unknown): GraphQLFormattedError => {
    const out = formatGraphqlError(formatted, error);
    if (out.extensions?.code === "INTERNAL") logInternal(error);
    return out;
  };
  const wss = new WebSocketServer({ server, path: "/graphql", maxPayload: config.graphqlMaxPayloadBytes });
  const sockets = new SocketSessions(credentials, bus);
  const wsServer = useServer<Record<string, unknown>>(
    {
      schema,
      onConnect: async (ctx) => {
        const raw = ctx.connectionParams?.authorization ?? ctx.connectionParams?.Authorization;
        const credential = typeof raw === "string" ? /^Bearer\s+(\S+)$/i.exec(raw)?.[1] : undefined;
        try {
          return await sockets.open(ctx.extra.socket, credential);
        } catch (err) {
          const refused = asDatabaseUnavailable(err);
          if (!refused) throw err;
          // The database, not the credential: "try again later", which graphql-ws clients retry
          // (issue 28, item 1: the 503 of every path; a 4403 said the credential was forbidden).
          ctx.extra.socket.close(SOCKET_TRY_AGAIN_LATER, refused.detail);
          return false;
        }
      },
      onClose: (ctx) => sockets.close(ctx.extra.socket),
      onSubscribe: (_ctx, _id, payload) => {
        const prepared = prepareDocument(schema, payload.query, limits);
        if ("errors" in prepared) return prepared.errors;
        return {
          schema,
          document: prepared.document,
          operationName: payload.operationName,
          variableValues: payload.variables,
        };
      },
      onError: (_ctx, _id, _payload, errors) => errors.map((e) => formatSocketError(e.toJSON(), e)),
      context: async (ctx): Promise<RequestContext> => {
        const base = { requestId: randomUUID(), ip: clientIp(app, ctx.extra.request) };
        try {
          return { ...base, principal: await sockets.principal(ctx.extra.socket) };
        } catch (err) {
          const refused = err instanceof AppError ? err : asDatabaseUnavailable(err);
          if (refused) return { ...base, credentialError: refused };
          throw err;
        }
      },
      onNext: (_ctx, _id, _payload, _args, result) =>
        "errors" in result && result.errors
          ? { ...result, errors: result.errors.map((e) => formatSocketError(e.toJSON(), e)) }
          : undefined,
    },
    wss,
  );
  const apollo = new ApolloServer<RequestContext>({
    // No automatic persisted queries: every operation comes with its document (and its limits).
    persistedQueries: false,
    schema,
    formatError,
    includeStacktraceInErrorResponses: false,
    parseOptions: { maxTokens: limits.maxTokens },
    validationRules: [shapeLimitRule(limits)],
    introspection: true,
    // Shutdown is ours (main.ts): Apollo's own signal handlers would stop it and re-raise the signal.
    stopOnTerminationSignals: false,
    plugins: [
      // Apollo's landing page loads its code from a CDN (blank offline): browsers get our bundled
      // GraphiQL instead (issue 27, item 7), mounted on GET /graphql before Apollo below.
      ApolloServerPluginLandingPageDisabled(),
      ApolloServerPluginDrainHttpServer({ httpServer: server }),
      {
        async requestDidStart() {
          return {
            // Subscriptions are served over graphql-ws; over HTTP graphql-js would run the field
            // as a query with no event and answer "Internal error" (review of issue 28).
            async didResolveOperation({ operation }) {
              if (operation?.operation !== "subscription") return;
              throw new GraphQLError("Subscriptions are served over graphql-ws on /graphql, not over HTTP", {
                extensions: { code: "BAD_REQUEST", http: { status: 400 } },
              });
            },
            async didEncounterErrors({ errors, contextValue }) {
              for (const error of errors) {
                if (formatGraphqlError(error.toJSON(), error).extensions?.code === "INTERNAL")
                  logInternal(error, contextValue.requestId);
              }
            },
          };
        },
      },
      {
        async serverWillStart() {
          return {
            async drainServer() {
              await wsServer.dispose();
            },
          };
        },
      },
    ],
  });
  await life.start({
    name: "HTTP and GraphQL",
    start: () => apollo.start(),
    stop: () => apollo.stop(),
  });
  await life.start({ name: "completion events", start: () => {}, stop: () => events.close() });
  app.get("/graphql", mountGraphiql(app));
  app.use(
    "/graphql",
    // A body must say it is JSON, as on REST (issue 28, item 4): 415, before Apollo's CSRF check.
    requireJsonMediaType,
    express.json({
      limit: config.graphqlMaxPayloadBytes,
      type: (req) => isJsonMediaType(req.headers["content-type"]),
      verify: verifyJsonDepth,
    }),
    graphqlSizeGuard(limits),
    expressMiddleware(apollo, {
      // The signal lets long mutations (createDecision) stop when the client leaves (review 11b, L2).
      context: async ({ req, res }) => ({
        ...(await contextFromCredential(
          presentedCredential(req),
          res.locals.requestId as string,
          requestOrigin(req),
          req.ip,
        )),
        signal: abortOnClose(res),
      }),
    }),
  );
  app.use("/graphql", graphqlErrorMiddleware(logger));
}
