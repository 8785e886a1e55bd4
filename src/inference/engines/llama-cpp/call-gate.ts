/**
 * Streamed text with tools offered on the embedded engine (issue 26, item 2): text is sent as
 * soon as it cannot be (the start of) a call in the model's format. The gate sees every decoded
 * token group twice — its text as the answer shows it (`plain`, special tokens left out) and as
 * the model wrote it (`raw`, special tokens written out, as a call's markers may be) — and holds
 * back only the part of the raw text from the leftmost place a call may start: where what follows
 * is, so far, whitespace and then a prefix of one of the format's call openers (whitespace inside
 * an opener may differ, as the readers of a call allow). A held part that diverges from every
 * opener is released with the next token; one that completes an opener is the start of a call and
 * holds everything after it until the answer is read (`finish`). Without openers (a forced call)
 * nothing is sent until then.
 *
 * Offsets: the readers of a call (`tool-calls.ts`, `template-tools.ts`) find it in the raw text;
 * `plainBefore` turns the raw offset where it starts into the plain text before it (what the
 * answer says before its call, `callPreamble`). A token group whose plain text is its raw text maps
 * offset for offset; one holding a special token maps to its start, so the plain text before a
 * call never holds part of a group the call may begin in. The gate sends only what `plainBefore`
 * of its hold point gives, so what it sent is always a prefix of the text answered in the end.
 */

/** Where a token group starts in the raw and plain text, and whether both say the same. */
interface Piece {
  raw: number;
  plain: number;
  same: boolean;
}

type Match = "dead" | "partial" | "complete";

const isSpace = (c: string) => /\s/.test(c);

/** The streamed text of one answer, held back where a call may start (see the module header). */
export class CallTextGate {
  private raw = "";
  private plain = "";
  private readonly pieces: Piece[] = [];
  /** Each opener's parts (its text split at whitespace); empty: hold everything. */
  private readonly openers: string[][];
  /** Raw offset from which nothing is released: the leftmost place a call may start; null: none yet. */
  private holdAt: number | null = null;
  /** Raw offset from which the next scan starts (every earlier place is known not to start a call). */
  private scanFrom = 0;
  /** True once an opener matched whole at `holdAt`: everything after it is held. */
  private called = false;
  /** The plain offset of `holdAt` once `called` (it no longer moves). */
  private calledPlain: number | null = null;
  /** Plain characters sent so far. */
  private sent = 0;

  /**
   * @param openers the texts that open a call in the model's format (special tokens written out);
   *   null: nothing is released before `finish` (a forced call's text is the call).
   * @param onText where released text goes (absent: nothing is streamed; the gate still maps offsets).
   */
  constructor(
    openers: string[] | null,
    private readonly onText?: (delta: string) => void,
  ) {
    this.openers = (openers ?? []).map((o) => o.trim().split(/\s+/)).filter((parts) => parts[0] !== "");
    if (openers === null) this.holdAt = 0;
  }

  /**
   * One decoded token group: its plain and raw text. Then sends what may be sent of the plain
   * text, up to `limit` plain characters (what the caller's stop strings let through).
   */
  push(plain: string, raw: string, limit: number): void {
    if (plain === "" && raw === "") return;
    this.pieces.push({ raw: this.raw.length, plain: this.plain.length, same: plain === raw });
    this.raw += raw;
    this.plain += plain;
    this.scan();
    this.release(limit);
  }

  /** Sends the plain text up to the hold point and `limit`. */
  release(limit: number): void {
    // Once a call started the hold point stays where it is: mapped once.
    if (this.called && this.calledPlain === null) this.calledPlain = this.plainAt(this.holdAt ?? 0);
    const held = this.calledPlain ?? (this.holdAt === null ? this.plain.length : this.plainAt(this.holdAt));
    const upTo = Math.min(limit, held);
    if (upTo > this.sent) {
      const delta = this.plain.slice(this.sent, upTo);
      this.sent = upTo;
      this.onText?.(delta);
    }
  }

  /**
   * The answer is read: sends what `answered` (the text the protocols answer: the text before the
   * calls, the whole text, or nothing) has beyond what was sent. What was sent is always a prefix
   * of it (see the module header); were it not, nothing more is sent.
   */
  finish(answered: string): void {
    const sent = this.plain.slice(0, this.sent);
    if (answered.length > sent.length && answered.startsWith(sent)) {
      this.onText?.(answered.slice(sent.length));
      this.sent = answered.length;
    }
  }

  /** The raw text of the token groups whose plain text lies within its first `plainLength` characters. */
  rawUpTo(plainLength: number): string {
    if (plainLength >= this.plain.length) return this.raw;
    let end = 0;
    for (let k = 0; k < this.pieces.length; k++) {
      const piece = this.pieces[k];
      const next = this.pieces[k + 1] ?? { raw: this.raw.length, plain: this.plain.length };
      if (next.plain <= plainLength) end = next.raw;
      else {
        if (piece.same && piece.plain < plainLength) end = piece.raw + (plainLength - piece.plain);
        break;
      }
    }
    return this.raw.slice(0, end);
  }

  /** The plain text before raw offset `rawOffset` (a call's start): what the answer says before it. */
  plainBefore(rawOffset: number): string {
    return this.plain.slice(0, this.plainAt(rawOffset));
  }

  /** Plain characters before raw offset `r`: offset for offset within a group that says the same, else at its start. */
  private plainAt(r: number): number {
    if (r <= 0) return 0;
    if (r >= this.raw.length) return this.plain.length;
    for (let k = this.pieces.length - 1; k >= 0; k--) {
      const piece = this.pieces[k];
      if (piece.raw <= r) return piece.same ? piece.plain + (r - piece.raw) : piece.plain;
    }
    return 0;
  }

  /** Moves the hold point to the leftmost place a call may still start (at or after the previous one). */
  private scan(): void {
    if (this.called || this.openers.length === 0) return;
    for (let i = this.scanFrom; i < this.raw.length; i++) {
      const match = this.matchAt(i);
      if (match === "dead") continue;
      this.scanFrom = i;
      this.holdAt = i;
      this.called = match === "complete";
      return;
    }
    this.scanFrom = this.raw.length;
    this.holdAt = null;
  }

  /** How the raw text from `i` matches whitespace and then one of the openers: the best of them. */
  private matchAt(i: number): Match {
    let best: Match = "dead";
    for (const parts of this.openers) {
      const m = this.matchOpener(i, parts);
      if (m === "complete") return m;
      if (m === "partial") best = m;
    }
    return best;
  }

  private matchOpener(i: number, parts: string[]): Match {
    const r = this.raw;
    let j = i;
    for (const part of parts) {
      while (j < r.length && isSpace(r[j])) j++;
      for (let c = 0; c < part.length; c++, j++) {
        if (j >= r.length) return "partial";
        if (r[j] !== part[c]) return "dead";
      }
    }
    return "complete";
  }
}
