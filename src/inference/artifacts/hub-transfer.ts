/**
 * One transfer of a model file into its part (issue 17; see `hub-download.ts` for staging,
 * resuming and the size cap): a GET from byte `have` on, resumed with `Range` and `If-Range`,
 * started over when the server's version differs from the part's, cut when it sends more than
 * the file's size or nothing for `stallMs`.
 */
import { open, rm, writeFile } from "node:fs/promises";
import { DownloadError } from "./download-error.js";
import { type Credential, hubRequest, redactUrl } from "./hub-request.js";

/** What a download reports while it runs (bytes; `total` 0 while unknown). */
export interface DownloadProgress {
  received: number;
  total: number;
  /** Bytes that were already on disk when this transfer began (a resumed part). */
  resumedFrom: number;
}

/** What a transfer is told by its caller (`DownloadOptions` carries these). */
export interface TransferOptions {
  /** Expected size in bytes (catalog `size_bytes`). */
  sizeBytes?: number;
  /** Abandon the transfer after this long without a byte, ms (default 30 s). */
  stallMs?: number;
  signal?: AbortSignal;
  onProgress?: (p: DownloadProgress) => void;
}

/** What a part is a part of, and the version of the file it holds (`<file>.part.json`). */
export interface PartMeta {
  url: string;
  sizeBytes: number | null;
  sha256: string | null;
  /** The version the part holds: `ETag` and `X-Linked-Etag` of the response its first byte came from. */
  etag?: string | null;
  linkedEtag?: string | null;
}

/** One transfer's inputs. */
export interface TransferContext {
  url: string;
  part: string;
  meta: PartMeta;
  credentials: Credential[];
  opts: TransferOptions;
  /** The caller's signal and the lock's `lost`. */
  signal: AbortSignal;
  lockPath: string;
}

/**
 * Fetches the file into the part from byte `have` on. @returns the file's total size, and the
 * bytes kept from before (0 when the whole file was sent again).
 * @throws DownloadError (`http`, `stalled`, `network`, `size`, `busy` when the lock was lost).
 */
export async function transfer(ctx: TransferContext, have: number): Promise<{ total: number; resumedFrom: number }> {
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
    const { res, linkedEtag } = await hubRequest(url, headers, ctx.credentials, signal);
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

/** Deletes a part and its record. */
export async function discard(part: string): Promise<void> {
  await rm(part, { force: true });
  await rm(part + ".json", { force: true });
}
