/**
 * Reading a create request's webhook keys and signing deliveries (spec: Events, Completion
 * webhook; DESIGN §3 Webhooks). Pure functions, shared by the inference path (which attaches a
 * webhook to a usage record) and the dispatcher (which signs what it sends).
 */
import { createHmac, randomBytes } from "node:crypto";

/** Where and how a finished request is announced: `metadata.completion_webhook` and `webhook_token`. */
export interface WebhookTarget {
  url: string;
  /** Sent as `Authorization: Bearer <token>`; null when none was set. Never logged. */
  token: string | null;
}

/** What a usage record carries to have a delivery written with it (see `MeteringService`). */
export interface WebhookRequest extends WebhookTarget {
  /** The object delivered: what `GET /v1/responses/{id}` returns (the chat completion for chat). */
  body: unknown;
}

/** Longest callback URL accepted (longer ones count as unusable). */
const MAX_URL_LENGTH = 2048;

/**
 * The request's webhook, or null when `completion_webhook` is absent or unusable (spec rule: "when
 * omitted or unusable, no callback is sent and the request is unaffected"). Usable: a string of at
 * most 2048 characters parsing as an absolute `http:` or `https:` URL with a host and no user
 * info. A `webhook_token` that is not a non-empty string is ignored.
 */
export function webhookTarget(metadata: Record<string, unknown> | null | undefined): WebhookTarget | null {
  const raw = metadata?.completion_webhook;
  if (typeof raw !== "string" || raw.length === 0 || raw.length > MAX_URL_LENGTH) return null;
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return null;
  }
  if ((url.protocol !== "http:" && url.protocol !== "https:") || !url.hostname || url.username || url.password) {
    return null;
  }
  return { url: url.toString(), token: webhookToken(metadata) };
}

/** What stands in for `metadata.webhook_token` wherever a request is stored. */
export const REDACTED_TOKEN = "[redacted]";

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * `metadata` as it may be stored: `webhook_token`, when present, replaced by `"[redacted]"` (the
 * token is a shared secret; it is never stored with the request nor readable back through any
 * API). Returns `metadata` itself when there is nothing to redact.
 */
export function redactedMetadata<T>(metadata: T): T {
  if (!isPlainObject(metadata) || !("webhook_token" in metadata)) return metadata;
  return { ...metadata, webhook_token: REDACTED_TOKEN } as T;
}

/** A create request's body as it may be stored (activity `body_json`, `request_json`): its `metadata` redacted. */
export function redactedRequest<T>(body: T): T {
  if (!isPlainObject(body) || !isPlainObject(body.metadata) || !("webhook_token" in body.metadata)) return body;
  return { ...body, metadata: redactedMetadata(body.metadata) } as T;
}

/**
 * The request's webhook token, as kept apart from the stored request (background responses keep
 * it in `responses.webhook_token` until their record is written): a non-empty string, else null.
 */
export function webhookToken(metadata: Record<string, unknown> | null | undefined): string | null {
  const token = metadata?.webhook_token;
  return typeof token === "string" && token.length > 0 ? token : null;
}

/** Stored (redacted) `metadata` with the token kept apart put back (or none, when `token` is null). */
export function withWebhookToken(
  metadata: Record<string, unknown> | null,
  token: string | null,
): Record<string, unknown> | null {
  if (!metadata) return metadata;
  const { webhook_token: _redacted, ...rest } = metadata;
  return token === null ? rest : { ...rest, webhook_token: token };
}

/** `whsec_` + base64 of at least 24 bytes (Standard Webhooks secrets are 24–64 bytes). */
export const SIGNING_SECRET_PATTERN = /^whsec_[A-Za-z0-9+/]{32,}={0,2}$/;

/** True when `secret` is a usable Standard Webhooks secret (`whsec_` + base64 of 24–64 bytes). */
export function isSigningSecret(secret: string): boolean {
  if (!SIGNING_SECRET_PATTERN.test(secret) || secret.length > 6 + 88) return false;
  const key = Buffer.from(secret.slice(6), "base64");
  return key.length >= 24 && key.length <= 64;
}

/** A new random signing secret: `whsec_` + base64 of 32 random bytes. */
export function newSigningSecret(): string {
  return `whsec_${randomBytes(32).toString("base64")}`;
}

/**
 * The Standard Webhooks `webhook-signature` value: `v1,` + base64 HMAC-SHA256 keyed with the
 * secret's base64-decoded part after `whsec_`, over `${id}.${timestamp}.${body}`.
 * @param timestamp Unix seconds, as sent in `webhook-timestamp`.
 */
export function signWebhook(secret: string, id: string, timestamp: number, body: string): string {
  const key = Buffer.from(secret.replace(/^whsec_/, ""), "base64");
  return `v1,${createHmac("sha256", key).update(`${id}.${timestamp}.${body}`).digest("base64")}`;
}
