/**
 * Downloads one model file from a Hugging Face-style hub (issue 17): resumable, verified, and
 * installed atomically, so a half-downloaded or corrupt file is never at the name the engine loads.
 *
 * - **Where.** `hf:owner/repo/path/in/repo.gguf[#revision]` → `<endpoint>/owner/repo/resolve/<revision>/path`
 *   (`revision` default `main`); `endpoint` is `HF_ENDPOINT` (default `https://huggingface.co`), so
 *   a mirror works. An `http(s)://` source is fetched as it is. `HF_TOKEN` is sent as a bearer
 *   token (a private repository); redirects are followed (the hub sends files from a CDN).
 * - **Staging.** Bytes go to `<dir>/.partial/<file>.part` beside the destination (same file
 *   system, so the final rename is atomic), with `<file>.part.json` recording what it is a part of
 *   (URL, size, SHA-256). A later pull of the same file resumes it with an HTTP `Range` request; a
 *   server that ignores the range starts it over.
 * - **Verify, then install.** The finished part must have the expected size (catalog
 *   `size_bytes`, else the server's) and SHA-256 (catalog `sha256`): a mismatch deletes the part
 *   and installs nothing. Then it is fsynced and renamed onto `<dir>/<file>`. Without a catalog
 *   checksum, the size is checked and the computed SHA-256 is returned for the caller to show.
 * - **One at a time.** `<file>.part.lock` (exclusive create, holding the pid) keeps two pulls from
 *   writing one part; a lock whose process is gone is taken over.
 * - **Stalls.** No byte for `stallMs` aborts the transfer (offline hosts often hang rather than
 *   fail); what arrived stays for the next pull.
 */
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { mkdir, open, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import path from "node:path";

/** Default hub (`HF_ENDPOINT` overrides it). */
export const DEFAULT_HUB = "https://huggingface.co";

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
  /** `HF_ENDPOINT`; default `https://huggingface.co`. */
  endpoint?: string;
  /** `HF_TOKEN`: sent as `Authorization: Bearer …`. */
  token?: string;
  /** Abandon the transfer after this long without a byte, ms (default 30 s). */
  stallMs?: number;
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

/** A download that failed verification or transfer; the message is one line for the user. */
export class DownloadError extends Error {
  override name = "DownloadError";
  constructor(
    message: string,
    /** `checksum`, `size`, `http`, `stalled`, `busy`, `source` or `network`. */
    readonly kind: "checksum" | "size" | "http" | "stalled" | "busy" | "source" | "network",
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

/** Where the part of `destination` is staged (see the module header). */
export function partialPath(destination: string): string {
  return path.join(path.dirname(destination), PARTIAL_DIR, path.basename(destination) + ".part");
}

interface PartMeta {
  url: string;
  sizeBytes: number | null;
  sha256: string | null;
}

/**
 * Downloads, verifies and installs one file (see the module header).
 * @throws DownloadError; nothing is installed then (a part may stay, to be resumed).
 */
export async function downloadModelFile(opts: DownloadOptions): Promise<DownloadResult> {
  const url = sourceUrl(opts.source, opts.endpoint);
  const part = partialPath(opts.destination);
  await mkdir(path.dirname(part), { recursive: true });
  const release = await lock(part + ".lock");
  try {
    const meta: PartMeta = { url, sizeBytes: opts.sizeBytes ?? null, sha256: opts.sha256?.toLowerCase() ?? null };
    // A part left by a pull of something else (another URL, size or checksum) is not resumed.
    const previous = await readFile(part + ".json", "utf8").then(
      (t) => JSON.parse(t) as PartMeta,
      () => undefined,
    );
    if (!previous || JSON.stringify(previous) !== JSON.stringify(meta)) await rm(part, { force: true });
    await writeFile(part + ".json", JSON.stringify(meta));

    let have = await fileSize(part);
    if (opts.sizeBytes !== undefined && have > opts.sizeBytes) {
      await rm(part, { force: true });
      have = 0;
    }
    const { total, resumedFrom } =
      opts.sizeBytes !== undefined && have === opts.sizeBytes
        ? { total: have, resumedFrom: have }
        : await transfer(url, part, have, opts);
    const actualSize = await fileSize(part);
    if (actualSize !== total || (opts.sizeBytes !== undefined && actualSize !== opts.sizeBytes)) {
      await discard(part);
      throw new DownloadError(
        `downloaded ${actualSize} bytes of ${url}, expected ${opts.sizeBytes ?? total}; nothing was installed`,
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
    await release();
  }
}

/**
 * Fetches `url` into `part` from byte `have` on. @returns the file's total size, and the bytes
 * kept from before (0 when the server sent the whole file again).
 * @throws DownloadError (`http`, `stalled`, `network`, `size`).
 */
async function transfer(
  url: string,
  part: string,
  have: number,
  opts: DownloadOptions,
): Promise<{ total: number; resumedFrom: number }> {
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
  const signal = opts.signal ? AbortSignal.any([opts.signal, controller.signal]) : controller.signal;
  const headers: Record<string, string> = { "user-agent": "switchyard-models" };
  if (opts.token) headers.authorization = `Bearer ${opts.token}`;
  if (have > 0) headers.range = `bytes=${have}-`;
  let file: Awaited<ReturnType<typeof open>> | undefined;
  try {
    const res = await fetch(url, { headers, signal, redirect: "follow" });
    if (res.status === 416 && have > 0) {
      // Nothing left past `have`: the part is whole when the server's size says so.
      await res.body?.cancel();
      const total = Number(/\/(\d+)$/.exec(res.headers.get("content-range") ?? "")?.[1] ?? NaN);
      if (total === have) return { total, resumedFrom: have };
      await rm(part, { force: true });
      return await transfer(url, part, 0, opts);
    }
    if (res.status !== 200 && res.status !== 206) {
      await res.body?.cancel();
      const hint =
        res.status === 401 || res.status === 403
          ? " (a private or gated repository needs HF_TOKEN)"
          : res.status === 404
            ? " (check the catalog's source and HF_ENDPOINT)"
            : "";
      throw new DownloadError(`${url} answered HTTP ${res.status}${hint}`, "http");
    }
    let offset = have;
    let total: number;
    if (res.status === 206) {
      const range = /^bytes (\d+)-(\d+)\/(\d+|\*)$/.exec(res.headers.get("content-range") ?? "");
      if (!range || Number(range[1]) !== have) {
        await res.body?.cancel();
        throw new DownloadError(`${url} answered a range that does not continue the download`, "http");
      }
      total = range[3] === "*" ? 0 : Number(range[3]);
    } else {
      offset = 0; // the server sent the whole file
      total = Number(res.headers.get("content-length") ?? 0);
    }
    if (opts.sizeBytes !== undefined && total > 0 && total !== opts.sizeBytes) {
      await res.body?.cancel();
      throw new DownloadError(
        `${url} is ${total} bytes, the catalog says ${opts.sizeBytes}; nothing was downloaded`,
        "size",
      );
    }
    const expected = total || opts.sizeBytes || 0;
    file = await open(part, offset === 0 ? "w" : "a");
    let received = offset;
    opts.onProgress?.({ received, total: expected, resumedFrom: offset });
    if (res.body) {
      for await (const chunk of res.body as AsyncIterable<Uint8Array>) {
        feed();
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
    const cause = (err as { cause?: { message?: string } }).cause?.message;
    throw new DownloadError(
      `downloading ${url} failed (${cause ?? (err as Error).message}); run the pull again to resume`,
      "network",
    );
  } finally {
    clearTimeout(watchdog);
    await file?.close();
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

async function discard(part: string): Promise<void> {
  await rm(part, { force: true });
  await rm(part + ".json", { force: true });
}

/**
 * Takes the lock file `file` (exclusive create, holding this pid); a lock whose process is gone
 * is taken over (one held by this process is not: a second pull of the same file here waits for
 * nothing and fails). @returns its release.
 * @throws DownloadError (`busy`) while another live process holds it.
 */
async function lock(file: string): Promise<() => Promise<void>> {
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      await writeFile(file, String(process.pid), { flag: "wx" });
      return () => rm(file, { force: true });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
      const pid = Number(await readFile(file, "utf8").catch(() => "0"));
      if (pid > 0 && (pid === process.pid || alive(pid))) {
        throw new DownloadError(`another pull of ${path.basename(file, ".part.lock")} is running (pid ${pid})`, "busy");
      }
      await rm(file, { force: true });
    }
  }
  throw new DownloadError(`cannot lock ${file}`, "busy");
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}
