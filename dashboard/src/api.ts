/**
 * The dashboard's only way to the service: GraphQL on `/graphql` — queries and mutations over
 * HTTP POST with `Authorization: Bearer <access token>`, the `completionEvents` subscription over
 * graphql-ws on the same path with the token in `connectionParams.authorization` (the server
 * checks it when the socket connects, and closes the socket with 4403 when it stops being valid).
 *
 * The access token (from `signup` or `login`) lives in `sessionStorage`: it survives a reload of
 * the tab, not the tab itself.
 */
import { type Client, createClient } from "graphql-ws";

const TOKEN_KEY = "switchyard.dashboard.token";

/** A GraphQL error as the service formats it (`extensions.code`, `status_code`, `extra`). */
export class GraphqlError extends Error {
  constructor(
    message: string,
    readonly code: string | undefined,
    readonly statusCode: number | undefined,
  ) {
    super(message);
  }
}

/** Called when the service says the token is no longer good (401): the app signs out. */
let onUnauthenticated: () => void = () => undefined;
export function setUnauthenticatedHandler(handler: () => void): void {
  onUnauthenticated = handler;
}

export function token(): string | null {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(value: string | null): void {
  if (value === null) sessionStorage.removeItem(TOKEN_KEY);
  else sessionStorage.setItem(TOKEN_KEY, value);
  closeSocket();
}

interface GraphqlAnswer<T> {
  data?: T;
  errors?: Array<{ message: string; extensions?: { code?: string; status_code?: number } }>;
}

/**
 * Runs one query or mutation; resolves with `data`, rejects with a `GraphqlError` carrying the
 * first error's message (401 also calls the sign-out handler).
 */
export async function gql<T>(query: string, variables: Record<string, unknown> = {}): Promise<T> {
  const headers: Record<string, string> = { "content-type": "application/json" };
  const current = token();
  if (current) headers.authorization = `Bearer ${current}`;
  let res: Response;
  try {
    res = await fetch("/graphql", { method: "POST", headers, body: JSON.stringify({ query, variables }) });
  } catch {
    throw new GraphqlError("The service could not be reached", undefined, undefined);
  }
  let answer: GraphqlAnswer<T>;
  try {
    answer = (await res.json()) as GraphqlAnswer<T>;
  } catch {
    throw new GraphqlError(`The service answered ${res.status}`, undefined, res.status);
  }
  const first = answer.errors?.[0];
  if (first) {
    const status = first.extensions?.status_code;
    if (status === 401 && current) onUnauthenticated();
    throw new GraphqlError(first.message, first.extensions?.code, status);
  }
  if (!answer.data) throw new GraphqlError(`The service answered ${res.status} without data`, undefined, res.status);
  return answer.data;
}

let socket: Client | undefined;
const socketListeners = new Set<(state: SocketState) => void>();

/** The live connection's state, shown next to the events list. */
export type SocketState = "connecting" | "connected" | "closed";

/** Tells `listener` about the graphql-ws connection's state; returns the unsubscribe function. */
export function onSocketState(listener: (state: SocketState) => void): () => void {
  socketListeners.add(listener);
  listener(socketState);
  return () => socketListeners.delete(listener);
}

let socketState: SocketState = "closed";
function emitSocketState(state: SocketState): void {
  socketState = state;
  for (const listener of socketListeners) listener(state);
}

/** The graphql-ws client of this session (one socket, opened on the first subscription). */
function liveClient(): Client {
  if (socket) return socket;
  const url = new URL("/graphql", location.href);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  socket = createClient({
    url: url.toString(),
    lazy: true,
    connectionParams: () => {
      const current = token();
      return current ? { authorization: `Bearer ${current}` } : {};
    },
    retryAttempts: 5,
    // 4403: the server refused or dropped the credentials; retrying with the same token is useless.
    shouldRetry: (event) => !(event instanceof CloseEvent && event.code === 4403),
    on: {
      connecting: () => emitSocketState("connecting"),
      connected: () => emitSocketState("connected"),
      closed: (event) => {
        emitSocketState("closed");
        if (event instanceof CloseEvent && event.code === 4403 && token()) onUnauthenticated();
      },
    },
  });
  return socket;
}

function closeSocket(): void {
  const open = socket;
  socket = undefined;
  if (open) void open.dispose();
}

/**
 * Subscribes over graphql-ws; `next` gets each result's `data`, `fail` a message. Returns the
 * function that ends the subscription.
 */
export function subscribe<T>(
  query: string,
  variables: Record<string, unknown>,
  next: (data: T) => void,
  fail: (message: string) => void,
): () => void {
  return liveClient().subscribe<T>(
    { query, variables },
    {
      next: (result) => {
        if (result.errors?.length) fail(result.errors[0].message);
        else if (result.data) next(result.data as T);
      },
      error: (err) => {
        if (err instanceof CloseEvent)
          fail(`Live connection closed (${err.code}${err.reason ? `: ${err.reason}` : ""})`);
        else if (Array.isArray(err)) fail((err as Array<{ message: string }>)[0]?.message ?? "Subscription refused");
        else fail(err instanceof Error ? err.message : "Live connection failed");
      },
      complete: () => undefined,
    },
  );
}
