/** Stop strings cut the answer before their first occurrence, even across chunks. */
import { StopSequenceFilter } from "../../src/inference/stop-sequences.js";

function run(stops: string[], chunks: string[]): { out: string; matched: string | null; stopped: boolean } {
  const f = new StopSequenceFilter(stops);
  let out = "";
  for (const c of chunks) {
    out += f.push(c);
    if (f.stopped) break;
  }
  out += f.end();
  return { out, matched: f.matched, stopped: f.stopped };
}

test("when a stop string sits inside one chunk, then the text before it is kept", () => {
  expect(run(["girl"], ["a little girl named"])).toEqual({ out: "a little ", matched: "girl", stopped: true });
});

test("when a stop string spans chunks, then nothing of it is emitted", () => {
  const f = new StopSequenceFilter(["END"]);
  expect(f.push("abc E")).toBe("abc ");
  expect(f.push("N")).toBe("");
  expect(f.push("D tail")).toBe("");
  expect(f.stopped).toBe(true);
  expect(f.matched).toBe("END");
});

test("when a held-back prefix turns out not to be a stop, then it is emitted", () => {
  expect(run(["END"], ["abc E", "Nx", " more"])).toEqual({ out: "abc ENx more", matched: null, stopped: false });
});

test("when several stops match, then the earliest occurrence wins", () => {
  expect(run(["b", "a"], ["xxab"])).toMatchObject({ out: "xx", matched: "a" });
});

test("when there are no stops, then text passes straight through", () => {
  const f = new StopSequenceFilter([]);
  expect(f.push("hello")).toBe("hello");
  expect(f.end()).toBe("");
});
