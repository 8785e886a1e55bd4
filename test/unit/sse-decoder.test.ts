/**
 * The upstream SSE decoder (`wire.ts`) reuses the text decoders of streams that ended (issue 30,
 * item 3): a stream after another must decode as if its decoder were new — its byte-order mark
 * dropped, nothing of the previous stream's unfinished character carried into it.
 */
import { SseDecoder } from "../../src/inference/engines/openai-compatible/wire.js";

const BOM = Buffer.from([0xef, 0xbb, 0xbf]);

/** The events of one stream fed as `chunks`, ended. */
function decode(chunks: Buffer[]): string[] {
  const decoder = new SseDecoder();
  const events = chunks.flatMap((c) => decoder.push(c));
  return [...events, ...decoder.end()];
}

describe("SseDecoder", () => {
  it("when an event's bytes are split inside a character, then the event is whole", () => {
    const bytes = Buffer.from('data: {"t":"héllo"}\n\n');
    const at = bytes.indexOf(0xc3) + 1;
    expect(decode([bytes.subarray(0, at), bytes.subarray(at)])).toEqual(['{"t":"héllo"}']);
  });

  it("when a stream ended inside a character, then the next stream decodes as with a new decoder", () => {
    for (let i = 0; i < 70; i++) decode([Buffer.from("data: a\n\n"), Buffer.from([0xe2, 0x82])]);
    expect(decode([Buffer.concat([BOM, Buffer.from("data: b\n\n")])])).toEqual(["b"]);
    expect(decode([Buffer.from("data: ✓\n"), Buffer.from("data: x")])).toEqual(["✓\nx"]);
  });

  it("when a stream starts with a byte-order mark, then its first event is read", () => {
    expect(decode([BOM, Buffer.from("data: first\n\ndata: second\n\n")])).toEqual(["first", "second"]);
  });
});
