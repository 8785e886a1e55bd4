/** Joining a chunked request body a few MB at a time (the batch create route, issue 7 item 1). */
import { randomBytes } from "node:crypto";
import { joinChunks } from "../../src/rest/handlers/batches.handler.js";

test("when chunks are joined in steps, then the result equals their concatenation, whatever the step", async () => {
  const chunks = [0, 1, 5, 64, 3, 1000, 0, 17].map((n) => randomBytes(n));
  const whole = Buffer.concat(chunks);
  for (const step of [1, 2, 64, 1_000, 10_000]) {
    expect((await joinChunks([...chunks], whole.length, step)).equals(whole)).toBe(true);
  }
  expect((await joinChunks([], 0, 4)).length).toBe(0);
});

test("when the join yields between steps, then other callbacks run before it ends", async () => {
  const chunks = Array.from({ length: 8 }, () => randomBytes(1024));
  let ranBetween = false;
  setImmediate(() => (ranBetween = true));
  const joined = joinChunks(chunks, 8 * 1024, 1024);
  expect(ranBetween).toBe(false);
  await joined;
  expect(ranBetween).toBe(true);
});
