/**
 * What a log line says of a request's URL (issue 27, item 4 "Quiet, useful logs"): the full path
 * as the client sent it (`req.originalUrl`, so mount prefixes stay: `/graphql`, `/docs/…`,
 * `/dashboard/…`, where `req.path` read at finish said `/`), with its secrets blanked:
 * - the value of every query parameter whose name says it may carry one (`token`, `api_key`,
 *   `secret`, `password`, `code`, `signature`, `session`, `state`, `nonce`, `email`, … — see
 *   `SECRET_PARAM`), e.g. the local payment provider's confirm link, an OAuth callback's code,
 *   a password-reset token;
 * - path segments, query values and bare query words shaped like our credentials (invitation
 *   tokens `inv_…` in `/control/v1/teams/invitations/{token}/accept`, API keys `sk_…`).
 */

/** What a blanked value reads as. */
export const REDACTED = "REDACTED";

/** Query parameter names whose values are blanked (matched anywhere in the decoded name). */
const SECRET_PARAM = /token|key|secret|pass|pwd|code|sig|session|state|auth|cred|jwt|invite|nonce|email/i;

/** Credentials we issue: invitation tokens and API keys (their prefixes). */
const CREDENTIAL = /^(inv_|sk_)/i;

/** `decodeURIComponent` of a query word (`+` is a space), or the word itself when malformed. */
function decoded(word: string): string {
  try {
    return decodeURIComponent(word.replace(/\+/g, " "));
  } catch {
    return word;
  }
}

/**
 * `originalUrl` with secrets blanked as the module header says; everything else kept as sent.
 * @example loggedPath("/v1/x?token=abc&limit=5") === "/v1/x?token=REDACTED&limit=5"
 */
export function loggedPath(originalUrl: string): string {
  const at = originalUrl.indexOf("?");
  const pathPart = at < 0 ? originalUrl : originalUrl.slice(0, at);
  const path = pathPart
    .split("/")
    .map((segment) => (CREDENTIAL.test(decoded(segment)) ? REDACTED : segment))
    .join("/");
  if (at < 0) return path;
  const query = originalUrl
    .slice(at + 1)
    .split("&")
    .map((part) => {
      const eq = part.indexOf("=");
      const name = eq < 0 ? part : part.slice(0, eq);
      if (CREDENTIAL.test(decoded(name))) return REDACTED;
      if (eq < 0) return part;
      const secret = SECRET_PARAM.test(decoded(name)) || CREDENTIAL.test(decoded(part.slice(eq + 1)));
      return secret ? `${name}=${REDACTED}` : part;
    })
    .join("&");
  return `${path}?${query}`;
}
