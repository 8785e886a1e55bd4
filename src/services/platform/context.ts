/**
 * The request context every service call takes first (`service.op(ctx, input)`): who is calling
 * and the request's id (and address). Built by the REST layer and the GraphQL context factory alike.
 */
import type { TeamRole } from "../../entities/user.entity.js";
import { AppError } from "../../shared/errors.js";

/** The API key a request was made with (spec: activity `api_key_id`, `api_key_name`, `api_key_prefix`). */
export interface ApiKeyIdentity {
  id: string;
  name: string;
  prefix: string;
}

/** An authenticated caller: a user of a team, through an API key or an access token. */
export interface Principal {
  userId: string;
  teamId: string;
  role: TeamRole;
  email: string;
  apiKey: ApiKeyIdentity | null;
}

export interface RequestContext {
  /** Absent on unauthenticated requests (signup, login, health). */
  principal?: Principal;
  /** Why presented credentials were refused; raised only by operations that need a caller. */
  credentialError?: AppError;
  /** Unique per HTTP request (also the `x-request-id` response header). */
  requestId: string;
  /** The request's origin (`http://host:port`), for absolute links such as a batch's `output_url`. */
  origin?: string;
  /**
   * The client's address (IPv4 or IPv6), for per-address throttling (issue 8, item 5): the socket
   * peer, or the forwarded client when `SWITCHYARD_TRUST_PROXY` names the proxy. Absent when unknown.
   */
  ip?: string;
  /**
   * Aborted when the client goes away before the answer is written (GraphQL over HTTP; REST
   * handlers make their own with `abortOnClose`). Absent when unknown (WebSocket operations).
   */
  signal?: AbortSignal;
}

/**
 * @returns the caller.
 * @throws AppError 401 when the request carried no valid credentials.
 */
export function requirePrincipal(ctx: RequestContext): Principal {
  if (!ctx.principal) throw ctx.credentialError ?? AppError.unauthenticated();
  return ctx.principal;
}
