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
 * - **One at a time.** A pull holds `<file>.part.lock` while it runs (`pull-lock.ts`): a second
 *   pull of the same file is refused (`busy`) meanwhile, and a stale lock is taken over.
 * - **Stalls.** No byte for `stallMs` aborts the transfer (offline hosts often hang rather than
 *   fail); what arrived stays for the next pull.
 */
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { mkdir, open, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import path from "node:path";
import { DownloadError } from "./download-error.js";
import {
  type Credential,
  DEFAULT_HUB,
  mayCarryCredentials,
  redactUrl,
  sourceUrl,
  splitCredentials,
} from "./hub-request.js";
import { type PartMeta, type TransferContext, type TransferOptions, discard, transfer } from "./hub-transfer.js";
import { acquirePullLock } from "./pull-lock.js";

/** What `downloadModelFile` fetches, from where, and how it is checked. */
export interface DownloadOptions extends TransferOptions {
  /** Catalog source: `hf:owner/repo/path[#revision]` or an http(s) URL. */
  source: string;
  /** Absolute path the verified file is installed at. */
  destination: string;
  /** Expected SHA-256, lowercase hex (catalog `sha256`). */
  sha256?: string;
  /** `HF_ENDPOINT`; default `https://huggingface.co`. May hold `user:pass@` (basic authentication). */
  endpoint?: string;
  /** `HF_TOKEN`: sent as `Authorization: Bearer …` to the endpoint's origin only. */
  token?: string;
  /** A lock without a heartbeat for this long is taken over, ms (default 60 s). */
  lockStaleMs?: number;
}

/** What `downloadModelFile` installed. */
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

/** Folder (inside the install folder) holding parts of downloads under way. */
export const PARTIAL_DIR = ".partial";

/** Where the part of `destination` is staged (see the module header). */
export function partialPath(destination: string): string {
  return path.join(path.dirname(destination), PARTIAL_DIR, path.basename(destination) + ".part");
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
