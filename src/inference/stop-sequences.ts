/**
 * Stop-sequence matching on streamed text, with OpenAI/Anthropic semantics: the answer is the
 * text before the first occurrence of any stop string, exclusive, even when the stop string
 * starts inside a token. Text that could still be the start of a stop string is held back until
 * it is known not to be, so a streamed answer never shows part of a stop string.
 */
export class StopSequenceFilter {
  private pending = "";
  private done = false;
  /** The stop string that matched, once one has. */
  matched: string | null = null;

  constructor(private readonly stops: readonly string[]) {}

  /** True once a stop string matched: generation should end. */
  get stopped(): boolean {
    return this.done;
  }

  /**
   * Feeds generated text.
   * @returns the text that is safe to emit now ("" while held back or after a match).
   */
  push(text: string): string {
    if (this.done) return "";
    const buffer = this.pending + text;
    let cut = -1;
    for (const stop of this.stops) {
      if (!stop) continue;
      const at = buffer.indexOf(stop);
      if (at >= 0 && (cut < 0 || at < cut)) {
        cut = at;
        this.matched = stop;
      }
    }
    if (cut >= 0) {
      this.done = true;
      this.pending = "";
      return buffer.slice(0, cut);
    }
    const hold = this.heldBack(buffer);
    this.pending = buffer.slice(buffer.length - hold);
    return buffer.slice(0, buffer.length - hold);
  }

  /** Flushes what was held back (generation ended without a match). */
  end(): string {
    const rest = this.done ? "" : this.pending;
    this.pending = "";
    return rest;
  }

  /** Length of the longest suffix of `buffer` that is a proper prefix of some stop string. */
  private heldBack(buffer: string): number {
    let longest = 0;
    for (const stop of this.stops) {
      for (let n = Math.min(stop.length - 1, buffer.length); n > longest; n--) {
        if (buffer.endsWith(stop.slice(0, n))) {
          longest = n;
          break;
        }
      }
    }
    return longest;
  }
}
