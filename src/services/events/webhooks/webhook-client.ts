/**
 * One webhook delivery attempt over node:http/https (DESIGN §3 Webhooks): resolve the URL's host,
 * classify every address (`address-policy.ts`), then connect to the address that was checked
 * (a `lookup` that answers only that address), so a DNS answer that changes between check and
 * connect (rebinding) cannot reach a refused address. Host header and TLS SNI/certificate checks
 * stay the URL's host name. Redirects are never followed; the whole attempt (DNS, connect, send,
 * answer) has one time ceiling.
 */
import { lookup as dnsLookup } from "node:dns/promises";
import http from "node:http";
import https from "node:https";
import { isIP, type LookupFunction } from "node:net";
import { classifyAddress } from "./address-policy.js";

/** What one attempt needs. `headers` must not be logged: they may carry the bearer token. */
export interface AttemptRequest {
  url: string;
  headers: Record<string, string>;
  body: string;
  /** Ceiling of the whole attempt, ms. */
  timeoutMs: number;
  /** Let private, loopback and link-local addresses through (`SWITCHYARD_WEBHOOK_ALLOW_PRIVATE`). */
  allowPrivate: boolean;
  /** Aborts the attempt (shutdown). */
  signal?: AbortSignal;
  /** Resolves a host name to its addresses (default: the system resolver, `dns.lookup`). */
  resolve?: Resolver;
}

/** A host name's addresses, as `dns.lookup(host, {all: true})` answers. */
export type Resolver = (host: string) => Promise<Array<{ address: string; family: number }>>;

const systemResolver: Resolver = (host) => dnsLookup(host, { all: true, verbatim: true });

/** The outcome of one attempt; `error` is safe to log and store (never holds headers). */
export interface AttemptResult {
  /** HTTP status of the answer, null when none came. */
  statusCode: number | null;
  latencyMs: number;
  error: string | null;
  /** True for a 2xx answer. */
  ok: boolean;
  /** `Retry-After` of a 429/503 answer, ms. */
  retryAfterMs: number | null;
  /** True when the address was refused by the SSRF rules (no connection was made). */
  refused: boolean;
}

/**
 * What a refused address's attempt records, logs and shows in the delivery log (issue 27, item 6:
 * the refusal names the setting that lifts it), e.g. `refused: private address (loopback); set
 * SWITCHYARD_WEBHOOK_ALLOW_PRIVATE=true to allow`.
 * @param reason the range the address fell in (`classifyAddress`).
 */
export function refusedAddressError(reason: string): string {
  return `refused: private address (${reason}); set SWITCHYARD_WEBHOOK_ALLOW_PRIVATE=true to allow`;
}

/** Raised when the target resolves to a refused address. */
class RefusedAddressError extends Error {}

/** Most of an answer's body that is read (then the rest is dropped). */
const MAX_ANSWER_BYTES = 64 * 1024;

/**
 * Resolves `host` and picks the address to connect to.
 * @throws RefusedAddressError when any resolved address is refused (a mixed answer is treated as
 *   hostile), or DNS errors.
 */
async function checkedAddress(
  host: string,
  allowPrivate: boolean,
  resolve: Resolver,
): Promise<{ address: string; family: number }> {
  const literal = isIP(host);
  const addresses = literal ? [{ address: host, family: literal }] : await resolve(host);
  if (addresses.length === 0) throw new Error("host did not resolve");
  if (!allowPrivate) {
    for (const a of addresses) {
      const verdict = classifyAddress(a.address);
      if (!verdict.allowed) throw new RefusedAddressError(refusedAddressError(verdict.reason));
    }
  }
  return addresses[0];
}

/**
 * Makes one POST attempt. Never throws: failures (refused address, DNS, connect, timeout, non-2xx)
 * come back in the result.
 */
export async function attemptDelivery(req: AttemptRequest): Promise<AttemptResult> {
  const started = performance.now();
  const done = (partial: Partial<AttemptResult>): AttemptResult => ({
    statusCode: null,
    error: null,
    ok: false,
    retryAfterMs: null,
    refused: false,
    ...partial,
    latencyMs: Math.round(performance.now() - started),
  });
  let url: URL;
  try {
    url = new URL(req.url);
  } catch {
    return done({ error: "invalid URL", refused: true });
  }
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), req.timeoutMs);
  const onAbort = () => controller.abort();
  req.signal?.addEventListener("abort", onAbort, { once: true });
  if (req.signal?.aborted) controller.abort();
  try {
    const host = url.hostname.startsWith("[") ? url.hostname.slice(1, -1) : url.hostname;
    const target = await Promise.race([
      checkedAddress(host, req.allowPrivate, req.resolve ?? systemResolver),
      new Promise<never>((_, reject) =>
        controller.signal.addEventListener("abort", () => reject(new Error("timed out")), { once: true }),
      ),
    ]);
    const lookup: LookupFunction = (_hostname, options, callback) => {
      if (options.all) callback(null, [{ address: target.address, family: target.family }]);
      else callback(null, target.address, target.family);
    };
    const answer = await new Promise<{ status: number; retryAfter: string | undefined }>((resolve, reject) => {
      const client = url.protocol === "https:" ? https : http;
      const outgoing = client.request(
        url,
        {
          method: "POST",
          headers: { ...req.headers, "content-length": String(Buffer.byteLength(req.body)) },
          lookup,
          agent: false,
          signal: controller.signal,
          ...(url.protocol === "https:" ? { servername: isIP(host) ? undefined : host } : {}),
        },
        (incoming) => {
          let read = 0;
          incoming.on("data", (chunk: Buffer) => {
            read += chunk.length;
            if (read > MAX_ANSWER_BYTES) incoming.destroy();
          });
          const finish = () =>
            resolve({ status: incoming.statusCode ?? 0, retryAfter: headerValue(incoming.headers["retry-after"]) });
          incoming.on("end", finish);
          incoming.on("close", finish);
          incoming.on("error", finish);
        },
      );
      outgoing.on("error", reject);
      outgoing.end(req.body);
    });
    const ok = answer.status >= 200 && answer.status < 300;
    return done({
      statusCode: answer.status,
      ok,
      error: ok
        ? null
        : answer.status >= 300 && answer.status < 400
          ? "redirect not followed"
          : `HTTP ${answer.status}`,
      retryAfterMs: answer.status === 429 || answer.status === 503 ? parseRetryAfter(answer.retryAfter) : null,
    });
  } catch (err) {
    if (err instanceof RefusedAddressError) return done({ error: err.message, refused: true });
    if (req.signal?.aborted) return done({ error: "aborted (shutting down)" });
    if (controller.signal.aborted) return done({ error: `timed out after ${req.timeoutMs} ms` });
    const code = (err as { code?: unknown }).code;
    return done({ error: typeof code === "string" ? code : (err as Error).message || "network error" });
  } finally {
    clearTimeout(timer);
    req.signal?.removeEventListener("abort", onAbort);
  }
}

function headerValue(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}

/** `Retry-After` as delay-seconds or an HTTP date, in ms (null when absent or unreadable). */
export function parseRetryAfter(value: string | undefined, now = Date.now()): number | null {
  if (!value) return null;
  if (/^\d+$/.test(value.trim())) return Number(value.trim()) * 1000;
  const at = Date.parse(value);
  return Number.isNaN(at) ? null : Math.max(0, at - now);
}
