/**
 * GraphiQL's fetcher (issue 27, item 7): queries and mutations over HTTP POST to `/graphql`,
 * subscriptions over graphql-ws on the same path (@graphiql/toolkit picks by the operation's
 * type), each with the headers of `operationHeaders` (the caller's credential) — over graphql-ws
 * they are the `connectionParams`, whose `authorization` the server checks when the socket
 * connects (src/app/graphql.ts). The toolkit opens one graphql-ws client per subscription.
 */
import { type Fetcher, type FetcherOpts, type FetcherParams, createGraphiQLFetcher } from "@graphiql/toolkit";
import { type DocumentNode, Kind, parse } from "graphql";
import { operationHeaders } from "./credential";

/**
 * The operation to run, and its document parsed from the text sent. GraphiQL 5 can send the
 * operation name (and parsed document) of the tab it showed before: a switch to the "Events" tab
 * sent "Team" ("Unknown operation named"), and the toolkit, which picks graphql-ws by the named
 * operation's type, then missed the subscription. A name the document does not define is
 * replaced by the document's only operation's (left as it is when there are several: the server
 * says which). Text that does not parse goes as it is (the server reports the syntax error).
 */
export function operationToRun(
  params: FetcherParams,
  opts: FetcherOpts | undefined,
): { params: FetcherParams; opts: FetcherOpts } {
  let document: DocumentNode;
  try {
    document = parse(params.query);
  } catch {
    return { params, opts: { ...opts } };
  }
  const names = document.definitions.flatMap((d) => (d.kind === Kind.OPERATION_DEFINITION ? [d.name?.value] : []));
  const named = params.operationName ?? undefined;
  const operationName = names.length === 1 && !names.includes(named) ? names[0] : named;
  return { params: { ...params, operationName: operationName ?? null }, opts: { ...opts, documentAST: document } };
}

/** The fetcher; `credential()` is read at each operation (the field's value now). */
export function createFetcher(credential: () => string): Fetcher {
  const socketUrl = new URL("/graphql", location.href);
  socketUrl.protocol = socketUrl.protocol === "https:" ? "wss:" : "ws:";
  const transport = createGraphiQLFetcher({
    url: "/graphql",
    subscriptionUrl: socketUrl.toString(),
    enableIncrementalDelivery: false,
  });
  return (graphqlParams, graphqlOpts) => {
    const { params, opts } = operationToRun(graphqlParams, graphqlOpts);
    return transport(params, { ...opts, headers: operationHeaders(opts.headers, credential()) });
  };
}
