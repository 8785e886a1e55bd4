/**
 * Where a model file is fetched from and how (issue 17): the URL of a catalog source on a
 * Hugging Face-style hub, the credentials each origin may receive, and a GET that follows
 * redirects by hand so those credentials never leave the endpoint's origin (review of issue 17,
 * finding 4; see `hub-download.ts`). Messages never show credentials (`redactUrl`).
 */
import { isLoopbackHost } from "../../config/config.js";
import { DownloadError } from "./download-error.js";

/** Default hub (`HF_ENDPOINT` overrides it). */
export const DEFAULT_HUB = "https://huggingface.co";

/**
 * The URL a catalog source is fetched from.
 * @throws DownloadError (`source`) for a source that is neither `hf:` nor http(s).
 */
export function sourceUrl(source: string, endpoint: string = DEFAULT_HUB): string {
  if (/^https?:\/\//i.test(source)) return source;
  const m = /^hf:([^/#]+)\/([^/#]+)\/([^#]+?)(?:#(.+))?$/.exec(source);
  if (!m) {
    throw new DownloadError(
      `unsupported model source ${source} (expected hf:owner/repo/path/file.gguf[#revision] or an http(s) URL)`,
      "source",
    );
  }
  const [, owner, repo, filePath, revision = "main"] = m;
  const base = endpoint.replace(/\/+$/, "");
  const encodedPath = filePath
    .split("/")
    .map((p) => encodeURIComponent(p))
    .join("/");
  return `${base}/${encodeURIComponent(owner)}/${encodeURIComponent(repo)}/resolve/${encodeURIComponent(revision)}/${encodedPath}`;
}

/** `url` with any `user:pass@` replaced by `***@`, for messages and logs (unparseable: as it is). */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (!u.username && !u.password) return url;
    u.username = "***";
    u.password = "";
    return u.href;
  } catch {
    return url.replace(/\/\/[^/@]*@/, "//***@");
  }
}

/** An origin and the `Authorization` header it may receive. */
export interface Credential {
  origin: string;
  authorization: string;
}

const REDIRECTS = new Set([301, 302, 303, 307, 308]);

/**
 * GET `url`, following redirects by hand so credentials go only where they belong (see the
 * module header). @returns the final response and the first `X-Linked-Etag` seen on the way.
 * @throws DownloadError (`http`) for a redirect loop, a redirect without a location or one to
 * plain http from https; fetch errors as they are.
 */
export async function hubRequest(
  url: string,
  headers: Record<string, string>,
  credentials: Credential[],
  signal: AbortSignal,
): Promise<{ res: Response; linkedEtag: string | undefined }> {
  let current = new URL(url);
  let linkedEtag: string | undefined;
  let leftOrigin = false;
  const firstOrigin = current.origin;
  for (let hop = 0; hop <= 10; hop++) {
    if (current.origin !== firstOrigin) leftOrigin = true;
    const auth = leftOrigin ? undefined : credentials.find((c) => c.origin === current.origin);
    const res = await fetch(current, {
      headers: auth ? { ...headers, authorization: auth.authorization } : headers,
      signal,
      redirect: "manual",
    });
    linkedEtag ??= res.headers.get("x-linked-etag") ?? undefined;
    if (!REDIRECTS.has(res.status)) return { res, linkedEtag };
    await res.body?.cancel();
    const location = res.headers.get("location");
    if (!location) throw new DownloadError(`${redactUrl(current.href)} redirected without a location`, "http");
    const next = new URL(location, current);
    if (next.protocol !== "https:" && !(next.protocol === "http:" && current.protocol === "http:")) {
      throw new DownloadError(`${redactUrl(current.href)} redirected to ${redactUrl(next.href)}: refused`, "http");
    }
    current = next;
  }
  throw new DownloadError(`${redactUrl(url)} redirected more than 10 times`, "http");
}

/** `url` without `user:pass@`, and those as a basic `Authorization` header. */
export function splitCredentials(url: string): { url: string; basic?: string } {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return { url };
  }
  if (!u.username && !u.password) return { url };
  const basic = `Basic ${Buffer.from(`${decodeURIComponent(u.username)}:${decodeURIComponent(u.password)}`).toString("base64")}`;
  u.username = "";
  u.password = "";
  return { url: u.href, basic };
}

/** Credentials travel over https, or plain http to this machine only. */
export function mayCarryCredentials(url: string): boolean {
  const u = new URL(url);
  return u.protocol === "https:" || (u.protocol === "http:" && isLoopbackHost(u.hostname));
}
