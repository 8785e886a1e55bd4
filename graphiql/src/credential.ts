/**
 * The caller's credential on the GraphiQL page (issue 27, item 7): which token the page sends, and
 * the headers of one operation.
 *
 * - The dashboard keeps its sign-in's access token in `sessionStorage` under `DASHBOARD_TOKEN_KEY`
 *   (dashboard/src/api.ts): same origin and same tab, so a person who signed in there and opens
 *   `/graphql` is the same caller here without typing anything.
 * - The page's field takes an API key (`sk_…`) or an access token (with or without `Bearer `);
 *   what is typed there wins over the dashboard's and is kept for the tab under `PAGE_TOKEN_KEY`
 *   (an emptied field stays empty: it means "no credential").
 * - An `Authorization` header written in GraphiQL's headers editor wins over both.
 *
 * Over HTTP the credential travels as `Authorization: Bearer <token>`; over graphql-ws as
 * `connectionParams.authorization` with the same value, which the server checks when the socket
 * connects (src/app/graphql.ts).
 */

/** Where dashboard/src/api.ts keeps the dashboard's access token. */
export const DASHBOARD_TOKEN_KEY = "switchyard.dashboard.token";
/** Where this page keeps what was typed into its field. */
export const PAGE_TOKEN_KEY = "switchyard.graphiql.token";

/** Where the field's first value came from. */
export type TokenSource = "page" | "dashboard" | "none";

/** The field's first value: what was typed before in this tab, else the dashboard's token, else nothing. */
export function initialToken(storage: Pick<Storage, "getItem">): { value: string; source: TokenSource } {
  const typed = storage.getItem(PAGE_TOKEN_KEY);
  if (typed !== null) return { value: typed, source: "page" };
  const dashboard = storage.getItem(DASHBOARD_TOKEN_KEY);
  if (dashboard) return { value: dashboard, source: "dashboard" };
  return { value: "", source: "none" };
}

/** `Bearer <token>` for what the field holds (a leading `Bearer ` is accepted); undefined when empty. */
export function bearer(field: string): string | undefined {
  const token = field.trim().replace(/^Bearer\s+/i, "");
  return token ? `Bearer ${token}` : undefined;
}

/**
 * The headers of one operation: the headers editor's, with one lower-case `authorization` (the
 * editor's own, whatever its case, else the field's). One key only: two spellings would reach the
 * server joined ("a, b") over HTTP, and graphql-ws's `connectionParams` would carry both.
 */
export function operationHeaders(editor: Record<string, unknown> | undefined, field: string): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  let authorization: unknown = bearer(field);
  for (const [name, value] of Object.entries(editor ?? {})) {
    if (name.toLowerCase() === "authorization") authorization = value;
    else out[name] = value;
  }
  if (authorization !== undefined && authorization !== "") out.authorization = authorization;
  return out;
}
