/**
 * The one error a model-file download raises (`hub-download.ts`, `pull-lock.ts`), and who holds a
 * pull lock (what a `busy` one names). Apart so both the transfer and the locks can raise it.
 */

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
