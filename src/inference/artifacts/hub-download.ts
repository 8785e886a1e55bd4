/**
 * Downloads one model file from a Hugging Face-style hub (issue 17): resumable, verified, and
 * installed atomically, so a half-downloaded or corrupt file is never at the name the engine loads.
 * Our own downloader rather than node-llama-cpp's (ipull): it resumes from the exact byte where a
 * transfer stopped, checks size and SHA-256 before the rename, and needs no network at all when
 * the file is already here.
 *
 * - **Where.** `hf:owner/repo/path/in/repo.gguf[#revision]` → `<endpoint>/owner/repo/resolve/<revision>/path`
 *   (`revision` default `main`); `endpoint` is `HF_ENDPOINT` (default `https://huggingface.co`), so
 *   a mirror works. An `http(s)://` source is fetched as it is. Redirects are followed by hand (at
 *   most 10; never from https down to plain http).
 * - **Credentials (review of issue 17, finding 4).** `HF_TOKEN` is sent as a bearer token, and
 *   credentials written in `HF_ENDPOINT` (`https://user:pass@mirror/`) as basic authentication,
 *   only to the endpoint's origin, only over https or to a loopback host, and never again once a
 *   redirect has left that origin (the hub sends files from a CDN that needs no token). Messages
 *   never show the credentials.
 * - **Staging.** Bytes go to `<dir>/.partial/<file>.part` beside the destination (same file
 *   system, so the final rename is atomic), with `<file>.part.json` recording what it is a part of
 *   (URL, size, SHA-256) and which version of the file it holds (the first response's `ETag` and
 *   `X-Linked-Etag`). A later pull resumes it with `Range` and `If-Range: <ETag>`: a server whose
 *   file changed sends it whole again, and a 206 whose version differs from the part's, or a part
 *   whose version is unknown and has no catalog checksum, starts over from byte 0, so two versions
 *   are never spliced (finding 5). A server that ignores the range starts it over too.
 * - **Size cap (finding 3).** A transfer that delivers more bytes than the file's size (catalog
 *   `size_bytes`, else the server's `Content-Length`/`Content-Range`) is cut at once and its part
 *   deleted; so is one whose announced size disagrees with the catalog's.
 * - **Verify, then install.** The finished part must have the expected size and SHA-256 (catalog
 *   `sha256`): a mismatch deletes the part and installs nothing. Then it is fsynced and renamed
 *   onto `<dir>/<file>`. Without a catalog checksum, the size is checked and the computed SHA-256
 *   is returned for the caller to show.
 * - **One at a time (finding 1).** `<file>.part.lock` names its holder (pid, host name, process
 *   start time, a random token) and is created atomically (a hard link of a complete temporary
 *   file). The holder touches it every `lockStaleMs / 6` (heartbeat). A lock is stale, and taken
 *   over, when it has had no heartbeat for `lockStaleMs` (default 60 s), when its process is gone
 *   (same host), or when it names this very process but this process does not hold it (a
 *   container's pid 1 restarted after a kill). A takeover happens under a gate file (exclusive
 *   create) and renames the new lock over the stale one after checking it is still that one, so
 *   two takeovers never both win (`takeOverStaleLock`); a holder whose lock was taken anyway (it stalled
 *   past `lockStaleMs`) sees its token gone at the next heartbeat and stops writing.
 * - **Stalls.** No byte for `stallMs` aborts the transfer (offline hosts often hang rather than
 *   fail); what arrived stays for the next pull.
 */
import { createHash, randomUUID } from "node:crypto";
import { createReadStream } from "node:fs";
import { link, mkdir, open, readFile, rename, rm, stat, utimes, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { isLoopbackHost } from "../../config/config.js";

/** Default hub (`HF_ENDPOINT` overrides it). */
export const DEFAULT_HUB = "https://huggingface.co";

/** A lock without a heartbeat for this long is stale (ms). */
export const DEFAULT_LOCK_STALE_MS = 60_000;

/** What a download reports while it runs (bytes; `total` 0 while unknown). */
export interface DownloadProgress {
  received: number;
  total: number;
  /** Bytes that were already on disk when this transfer began (a resumed part). */
  resumedFrom: number;
}

export interface DownloadOptions {
  /** Catalog source: `hf:owner/repo/path[#revision]` or an http(s) URL. */
  source: string;
  /** Absolute path the verified file is installed at. */
  destination: string;
  /** Expected size in bytes (catalog `size_bytes`). */
  sizeBytes?: number;
  /** Expected SHA-256, lowercase hex (catalog `sha256`). */
  sha256?: string;
  /** `HF_ENDPOINT`; default `https://huggingface.co`. May hold `user:pass@` (basic authentication). */
  endpoint?: string;
  /** `HF_TOKEN`: sent as `Authorization: Bearer …` to the endpoint's origin only. */
  token?: string;
  /** Abandon the transfer after this long without a byte, ms (default 30 s). */
  stallMs?: number;
  /** A lock without a heartbeat for this long is taken over, ms (default 60 s). */
  lockStaleMs?: number;
  signal?: AbortSignal;
  onProgress?: (p: DownloadProgress) => void;
}

export interface DownloadResult {
  path: string;
  sizeBytes: number;
  /** SHA-256 of the installed file, lowercase hex. */
  sha256: string;
  /** False when the catalog gave no checksum (size checked only). */
  checksumVerified: boolean;
  /** Bytes taken from an earlier, interrupted pull. */
  resumedFrom: number;
}

/** Who holds a pull lock (the lock file's content). */
export interface LockHolder {
  pid: number;
  /** `os.hostname()` of the holder; "" for a lock of an older version (a bare pid). */
  host: string;
  /** When the holder process started, Unix ms (0 when unknown). */
  started: number;
  /** Random, one per acquisition: tells two locks of one pid apart. */
  token: string;
}

/** A download that failed verification or transfer; the message is one line for the user. */
export class DownloadError extends Error {
  override name = "DownloadError";
  constructor(
    message: string,
    /** `checksum`, `size`, `http`, `stalled`, `busy`, `source` or `network`. */
    readonly kind: "checksum" | "size" | "http" | "stalled" | "busy" | "source" | "network",
    /** For `busy`: the lock file and its holder. */
    readonly lock?: { path: string; holder?: LockHolder },
  ) {
    super(message);
  }
}

/** Folder (inside the install folder) holding parts of downloads under way. */
export const PARTIAL_DIR = ".partial";

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

/** Where the part of `destination` is staged (see the module header). */
export function partialPath(destination: string): string {
  return path.join(path.dirname(destination), PARTIAL_DIR, path.basename(destination) + ".part");
}

interface PartMeta {
  url: string;
  sizeBytes: number | null;
  sha256: string | null;
  /** The version the part holds: `ETag` and `X-Linked-Etag` of the response its first byte came from. */
  etag?: string | null;
  linkedEtag?: string | null;
}

/** An origin and the `Authorization` header it may receive. */
interface Credential {
  origin: string;
  authorization: string;
}

/**
 * Downloads, verifies and installs one file (see the module header).
 * @throws DownloadError; nothing is installed then (a part may stay, to be resumed).
 */
export async function downloadModelFile(opts: DownloadOptions): Promise<DownloadResult> {
  const endpoint = splitCredentials(opts.endpoint ?? DEFAULT_HUB);
  const source = /^https?:\/\//i.test(opts.source) ? splitCredentials(opts.source) : undefined;
  const url = sourceUrl(source?.url ?? opts.source, endpoint.url);
  const credentials: Credential[] = [];
  const endpointAuth = opts.token ? `Bearer ${opts.token}` : endpoint.basic;
  if (endpointAuth && mayCarryCredentials(endpoint.url)) {
    credentials.push({ origin: new URL(endpoint.url).origin, authorization: endpointAuth });
  }
  if (source?.basic && mayCarryCredentials(source.url)) {
    credentials.push({ origin: new URL(source.url).origin, authorization: source.basic });
  }
  const part = partialPath(opts.destination);
  await mkdir(path.dirname(part), { recursive: true });
  const held = await acquirePullLock(part + ".lock", { staleMs: opts.lockStaleMs });
  try {
    const meta: PartMeta = { url, sizeBytes: opts.sizeBytes ?? null, sha256: opts.sha256?.toLowerCase() ?? null };
    // A part left by a pull of something else (another URL, size or checksum) is not resumed.
    const previous = await readFile(part + ".json", "utf8").then(
      (t) => JSON.parse(t) as PartMeta,
      () => undefined,
    );
    const same =
      previous && previous.url === meta.url && previous.sizeBytes === meta.sizeBytes && previous.sha256 === meta.sha256;
    if (same) {
      meta.etag = previous.etag ?? null;
      meta.linkedEtag = previous.linkedEtag ?? null;
    } else {
      await rm(part, { force: true });
    }
    await writeFile(part + ".json", JSON.stringify(meta));

    let have = await fileSize(part);
    if (opts.sizeBytes !== undefined && have > opts.sizeBytes) {
      await rm(part, { force: true });
      have = 0;
    }
    const signal = AbortSignal.any([held.lost, ...(opts.signal ? [opts.signal] : [])]);
    const ctx: TransferContext = { url, part, meta, credentials, opts, signal, lockPath: held.path };
    const { total, resumedFrom } =
      opts.sizeBytes !== undefined && have === opts.sizeBytes
        ? { total: have, resumedFrom: have }
        : await transfer(ctx, have);
    const actualSize = await fileSize(part);
    if (actualSize !== total || (opts.sizeBytes !== undefined && actualSize !== opts.sizeBytes)) {
      await discard(part);
      throw new DownloadError(
        `downloaded ${actualSize} bytes of ${redactUrl(url)}, expected ${opts.sizeBytes ?? total}; nothing was installed`,
        "size",
      );
    }
    const sha256 = await sha256Of(part);
    if (meta.sha256 && sha256 !== meta.sha256) {
      await discard(part);
      throw new DownloadError(
        `SHA-256 mismatch for ${path.basename(opts.destination)}: got ${sha256}, the catalog says ${meta.sha256}; ` +
          `the download was deleted and nothing was installed`,
        "checksum",
      );
    }
    held.check();
    const fd = await open(part, "r+");
    await fd.sync();
    await fd.close();
    await rename(part, opts.destination);
    await rm(part + ".json", { force: true });
    return {
      path: opts.destination,
      sizeBytes: actualSize,
      sha256,
      checksumVerified: meta.sha256 !== null,
      resumedFrom,
    };
  } finally {
    await held.release();
  }
}

interface TransferContext {
  url: string;
  part: string;
  meta: PartMeta;
  credentials: Credential[];
  opts: DownloadOptions;
  /** The caller's signal and the lock's `lost`. */
  signal: AbortSignal;
  lockPath: string;
}

/**
 * Fetches the file into the part from byte `have` on. @returns the file's total size, and the
 * bytes kept from before (0 when the whole file was sent again).
 * @throws DownloadError (`http`, `stalled`, `network`, `size`, `busy` when the lock was lost).
 */
async function transfer(ctx: TransferContext, have: number): Promise<{ total: number; resumedFrom: number }> {
  const { url, part, meta, opts } = ctx;
  const shown = redactUrl(url);
  if (have > 0 && !knownVersion(meta) && !meta.sha256) {
    // Nothing tells whether the server still has the version the part came from: start over.
    await rm(part, { force: true });
    have = 0;
  }
  const stallMs = opts.stallMs ?? 30_000;
  const controller = new AbortController();
  let stalled = false;
  let watchdog = setTimeout(() => {
    stalled = true;
    controller.abort();
  }, stallMs);
  const feed = () => {
    clearTimeout(watchdog);
    watchdog = setTimeout(() => {
      stalled = true;
      controller.abort();
    }, stallMs);
  };
  const signal = AbortSignal.any([ctx.signal, controller.signal]);
  // identity: `Content-Length` and the byte offsets are those of the file itself.
  const headers: Record<string, string> = { "user-agent": "switchyard-models", "accept-encoding": "identity" };
  if (have > 0) {
    headers.range = `bytes=${have}-`;
    if (meta.etag && !meta.etag.startsWith("W/")) headers["if-range"] = meta.etag;
  }
  let file: Awaited<ReturnType<typeof open>> | undefined;
  try {
    const { res, linkedEtag } = await request(url, headers, ctx.credentials, signal);
    if (res.status === 416 && have > 0) {
      // Nothing left past `have`: the part is whole when the server's size says so.
      await res.body?.cancel();
      const total = Number(/\/(\d+)$/.exec(res.headers.get("content-range") ?? "")?.[1] ?? NaN);
      if (total === have && sameVersion(meta, res, linkedEtag) !== false) return { total, resumedFrom: have };
      await rm(part, { force: true });
      return await transfer(ctx, 0);
    }
    if (res.status !== 200 && res.status !== 206) {
      await res.body?.cancel();
      const hint =
        res.status === 401 || res.status === 403
          ? " (a private or gated repository needs HF_TOKEN)"
          : res.status === 404
            ? " (check the catalog's source and HF_ENDPOINT)"
            : "";
      throw new DownloadError(`${shown} answered HTTP ${res.status}${hint}`, "http");
    }
    let offset = have;
    let total: number;
    if (res.status === 206) {
      const range = /^bytes (\d+)-(\d+)\/(\d+|\*)$/.exec(res.headers.get("content-range") ?? "");
      if (!range || Number(range[1]) !== have) {
        await res.body?.cancel();
        throw new DownloadError(`${shown} answered a range that does not continue the download`, "http");
      }
      if (sameVersion(meta, res, linkedEtag) === false) {
        // The file changed since the part began (a server that ignores If-Range): start over.
        await res.body?.cancel();
        await rm(part, { force: true });
        return await transfer(ctx, 0);
      }
      total = range[3] === "*" ? 0 : Number(range[3]);
    } else {
      offset = 0; // the server sent the whole file
      total = Number(res.headers.get("content-length") ?? 0);
      // This response's version is what the part will hold from now on.
      meta.etag = res.headers.get("etag");
      meta.linkedEtag = linkedEtag ?? null;
      await writeFile(part + ".json", JSON.stringify(meta));
    }
    if (opts.sizeBytes !== undefined && total > 0 && total !== opts.sizeBytes) {
      await res.body?.cancel();
      throw new DownloadError(
        `${shown} is ${total} bytes, the catalog says ${opts.sizeBytes}; nothing was downloaded`,
        "size",
      );
    }
    const expected = opts.sizeBytes ?? total;
    const length = res.headers.get("content-length");
    if (expected > 0 && length !== null && offset + Number(length) !== expected) {
      await res.body?.cancel();
      throw new DownloadError(
        `${shown} announced ${offset + Number(length)} bytes, expected ${expected}; nothing was downloaded`,
        "size",
      );
    }
    file = await open(part, offset === 0 ? "w" : "a");
    let received = offset;
    opts.onProgress?.({ received, total: expected, resumedFrom: offset });
    if (res.body) {
      for await (const chunk of res.body as AsyncIterable<Uint8Array>) {
        feed();
        if (expected > 0 && received + chunk.byteLength > expected) {
          // More than the file's size: a wrong or endless body. Keep nothing of it.
          controller.abort();
          await file.close();
          file = undefined;
          await discard(part);
          throw new DownloadError(
            `${shown} sent more than the expected ${expected} bytes; the download was cut and deleted`,
            "size",
          );
        }
        await file.write(chunk);
        received += chunk.byteLength;
        opts.onProgress?.({ received, total: expected, resumedFrom: offset });
      }
    }
    return { total: expected || received, resumedFrom: offset };
  } catch (err) {
    if (err instanceof DownloadError) throw err;
    if (stalled) {
      throw new DownloadError(
        `no data from ${new URL(url).host} for ${Math.round(stallMs / 1000)} s; run the pull again to resume`,
        "stalled",
      );
    }
    if (opts.signal?.aborted) throw opts.signal.reason;
    if (ctx.signal.aborted) {
      throw new DownloadError(
        `another process took over the lock ${ctx.lockPath} (this pull had no heartbeat for too long); ` +
          `this pull stopped`,
        "busy",
        { path: ctx.lockPath },
      );
    }
    const cause = (err as { cause?: { message?: string } }).cause?.message;
    throw new DownloadError(
      `downloading ${shown} failed (${cause ?? (err as Error).message}); run the pull again to resume`,
      "network",
    );
  } finally {
    clearTimeout(watchdog);
    await file?.close();
  }
}

const REDIRECTS = new Set([301, 302, 303, 307, 308]);

/**
 * GET `url`, following redirects by hand so credentials go only where they belong (see the
 * module header). @returns the final response and the first `X-Linked-Etag` seen on the way.
 * @throws DownloadError (`http`) for a redirect loop, a redirect without a location or one to
 * plain http from https; fetch errors as they are.
 */
async function request(
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
function splitCredentials(url: string): { url: string; basic?: string } {
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
function mayCarryCredentials(url: string): boolean {
  const u = new URL(url);
  return u.protocol === "https:" || (u.protocol === "http:" && isLoopbackHost(u.hostname));
}

function knownVersion(meta: PartMeta): boolean {
  return !!(meta.etag || meta.linkedEtag);
}

/**
 * Whether `res` serves the version the part holds: true, false, or undefined when nothing tells
 * (no validator on one side). `X-Linked-Etag` (the hub's id of the file's content, the same on
 * every CDN host) is compared first, then `ETag`.
 */
function sameVersion(meta: PartMeta, res: Response, linkedEtag: string | undefined): boolean | undefined {
  if (meta.linkedEtag && linkedEtag) return meta.linkedEtag === linkedEtag;
  const etag = res.headers.get("etag");
  if (meta.etag && etag) return meta.etag.replace(/^W\//, "") === etag.replace(/^W\//, "");
  return undefined;
}

/** SHA-256 of a file, lowercase hex. */
export async function sha256Of(file: string): Promise<string> {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(file, { highWaterMark: 1 << 20 })) hash.update(chunk as Buffer);
  return hash.digest("hex");
}

async function fileSize(file: string): Promise<number> {
  return stat(file).then(
    (s) => s.size,
    () => 0,
  );
}

async function discard(part: string): Promise<void> {
  await rm(part, { force: true });
  await rm(part + ".json", { force: true });
}

// ---------------------------------------------------------------------------------------------
// Pull locks (finding 1 of the review of issue 17; see the module header).

/**
 * Tokens of the locks this process holds. A lock naming this pid whose token is not here is
 * stale (by token, not path: one file reached by two spellings of its path is still one lock).
 */
const heldTokens = new Set<string>();

/** When this process started, Unix ms (recorded in its locks). */
const PROCESS_STARTED = Math.round(Date.now() - process.uptime() * 1000);

/** What a lock file says, judged (see `inspectPullLock`). */
export type LockState =
  | { state: "absent" }
  | { state: "live"; holder: LockHolder; ageMs: number }
  | { state: "stale"; holder: LockHolder; why: string; raw: string; ino: number };

/**
 * Reads and judges the lock file `file`: `absent`; `live` (held by a pull under way); or
 * `stale` (`why` says why: no heartbeat for `staleMs`, its process gone, or this process's own
 * pid without this process holding it).
 */
export async function inspectPullLock(file: string, staleMs = DEFAULT_LOCK_STALE_MS): Promise<LockState> {
  let raw: string;
  let info: Awaited<ReturnType<typeof stat>>;
  try {
    info = await stat(file);
    raw = await readFile(file, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return { state: "absent" };
    throw err;
  }
  const holder = parseHolder(raw);
  const ageMs = Date.now() - info.mtimeMs;
  const stale = (why: string): LockState => ({ state: "stale", holder, why, raw, ino: Number(info.ino) });
  if (heldTokens.has(holder.token)) return { state: "live", holder, ageMs };
  if (ageMs > staleMs) return stale(`no heartbeat for ${Math.round(ageMs / 1000)} s`);
  const sameHost = holder.host === "" || holder.host === os.hostname();
  if (sameHost && holder.pid === process.pid)
    return stale(`it names this process (pid ${holder.pid}), which does not hold it`);
  // No pid: unreadable, or being written on a file system without hard links (then young).
  if (holder.pid <= 0) return ageMs > 5_000 ? stale("it names no process") : { state: "live", holder, ageMs };
  if (sameHost && !alive(holder.pid)) return stale(`process ${holder.pid} is gone`);
  return { state: "live", holder, ageMs };
}

/** A lock this process holds. */
export interface HeldLock {
  path: string;
  /** Aborted when another process took the lock over (this one stalled past the stale time). */
  lost: AbortSignal;
  /** @throws DownloadError (`busy`) when the lock was lost. */
  check(): void;
  /** Stops the heartbeat and deletes the lock file when it is still this one. */
  release(): Promise<void>;
}

/**
 * Takes the pull lock `file` (see the module header), taking over a stale one.
 * @throws DownloadError (`busy`, with `lock`) while a live pull holds it; the message names the
 * lock file and its holder.
 */
export async function acquirePullLock(file: string, opts: { staleMs?: number } = {}): Promise<HeldLock> {
  const staleMs = opts.staleMs ?? DEFAULT_LOCK_STALE_MS;
  const token = randomUUID();
  const mine: LockHolder = { pid: process.pid, host: os.hostname(), started: PROCESS_STARTED, token };
  const tmp = `${file}.${token}.tmp`;
  await writeFile(tmp, JSON.stringify(mine));
  try {
    for (let attempt = 0; ; attempt++) {
      if (await createLink(tmp, file)) break;
      const judged = await inspectPullLock(file, staleMs);
      if (judged.state === "absent") continue;
      if (judged.state === "live") throw busyError(file, judged.holder, staleMs);
      if (await takeOverStaleLock(file, judged, staleMs, tmp)) break;
      if (attempt >= 100) {
        throw new DownloadError(`cannot take the lock ${file}: it keeps changing hands`, "busy", { path: file });
      }
      await sleep(5 + Math.random() * 20); // another process is taking it over: look again
    }
    heldTokens.add(token);
    return heldLock(file, token, staleMs);
  } finally {
    await rm(tmp, { force: true });
  }
}

/**
 * Deletes the lock file `file` when it is stale (`models rm`). @returns whether one was deleted.
 * @throws DownloadError (`busy`) when a live pull holds it.
 */
export async function clearStalePullLock(file: string, staleMs = DEFAULT_LOCK_STALE_MS): Promise<boolean> {
  for (let attempt = 0; attempt < 100; attempt++) {
    const judged = await inspectPullLock(file, staleMs);
    if (judged.state === "absent") return false;
    if (judged.state === "live") throw busyError(file, judged.holder, staleMs);
    if (await takeOverStaleLock(file, judged, staleMs)) return true;
    await sleep(5 + Math.random() * 20);
  }
  throw new DownloadError(`cannot clear the lock ${file}: it keeps changing hands`, "busy", { path: file });
}

function busyError(file: string, holder: LockHolder, staleMs: number): DownloadError {
  const who = `pid ${holder.pid}${holder.host ? ` on ${holder.host}` : ""}`;
  return new DownloadError(
    `another pull of ${path.basename(file, ".part.lock")} is running (${who}; lock ${file}); ` +
      `it is taken over once that process is gone or ${Math.round(staleMs / 1000)} s without a heartbeat`,
    "busy",
    { path: file, holder },
  );
}

/** Hard-links the complete lock `tmp` to `file` (atomic, fails when `file` exists). @returns false on EEXIST. */
async function createLink(tmp: string, file: string): Promise<boolean> {
  try {
    await link(tmp, file);
    return true;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "EEXIST") return false;
    if (code !== "EPERM" && code !== "ENOTSUP" && code !== "EOPNOTSUPP") throw err;
  }
  // A file system without hard links: an exclusive create (a reader may briefly see it empty).
  try {
    await writeFile(file, await readFile(tmp), { flag: "wx" });
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "EEXIST") return false;
    throw err;
  }
}

/** A takeover gate older than this belongs to a process that died inside it (it is held for ms). */
const GATE_STALE_MS = 10_000;

/**
 * Replaces the stale lock `judged` at `file` by the complete lock file `install` (renamed onto
 * it: the lock path is never empty meanwhile), or deletes it when `install` is absent. Only a
 * process holding the takeover gate `<file>.takeover` (an exclusive create) may do that, and it
 * first checks that `file` is still the very lock judged stale (same inode, same content, still
 * stale). No one removes or replaces a lock without the gate, and an exclusive create cannot
 * succeed while a lock exists, so two takeovers never both win.
 * @returns true when this process replaced (or deleted) it; false when the gate was taken or the
 * lock changed meanwhile (look again).
 */
export async function takeOverStaleLock(
  file: string,
  judged: Extract<LockState, { state: "stale" }>,
  staleMs: number,
  install?: string,
): Promise<boolean> {
  const gate = `${file}.takeover`;
  try {
    await writeFile(gate, String(process.pid), { flag: "wx" });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    await clearDeadGate(gate);
    return false;
  }
  try {
    const again = await inspectPullLock(file, staleMs);
    if (again.state !== "stale" || again.ino !== judged.ino || again.raw !== judged.raw) return false;
    if (install) await rename(install, file);
    else await rm(file, { force: true });
    return true;
  } finally {
    await rm(gate, { force: true });
  }
}

/**
 * Removes a takeover gate left by a process that died inside it (older than `GATE_STALE_MS`):
 * renamed aside, and put back if what moved was a newer gate (not the dead one).
 */
async function clearDeadGate(gate: string): Promise<void> {
  const info = await stat(gate).catch(() => undefined);
  if (!info || Date.now() - info.mtimeMs < GATE_STALE_MS) return;
  const aside = `${gate}.${randomUUID()}`;
  try {
    await rename(gate, aside);
  } catch {
    return;
  }
  try {
    if ((await stat(aside)).ino !== info.ino) await link(aside, gate).catch(() => undefined);
  } finally {
    await rm(aside, { force: true });
  }
}

function heldLock(file: string, token: string, staleMs: number): HeldLock {
  const controller = new AbortController();
  const beat = async () => {
    try {
      const raw = await readFile(file, "utf8");
      if (parseHolder(raw).token !== token) throw new Error("taken over");
      const now = new Date();
      await utimes(file, now, now);
    } catch {
      clearInterval(timer);
      heldTokens.delete(token);
      controller.abort(new Error(`lost the lock ${file}`));
    }
  };
  const timer = setInterval(() => void beat(), Math.max(50, Math.floor(staleMs / 6)));
  timer.unref();
  const lostError = () =>
    new DownloadError(`another process took over the lock ${file}; this pull stopped`, "busy", { path: file });
  return {
    path: file,
    lost: controller.signal,
    check() {
      if (controller.signal.aborted) throw lostError();
    },
    async release() {
      clearInterval(timer);
      if (!heldTokens.delete(token)) return;
      const raw = await readFile(file, "utf8").catch(() => "");
      if (parseHolder(raw).token === token) await rm(file, { force: true });
    },
  };
}

/** A lock file's content: JSON `LockHolder`, or a bare pid (older versions). */
function parseHolder(raw: string): LockHolder {
  try {
    const v = JSON.parse(raw) as Partial<LockHolder> | number;
    if (typeof v === "number") return { pid: v, host: "", started: 0, token: "" };
    return {
      pid: Number(v.pid) || 0,
      host: typeof v.host === "string" ? v.host : "",
      started: Number(v.started) || 0,
      token: typeof v.token === "string" ? v.token : "",
    };
  } catch {
    return { pid: 0, host: "", started: 0, token: "" };
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}
