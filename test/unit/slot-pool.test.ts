/** Engine slots: one request per slot, FIFO waiting, bounded waits, aborts. */
import { SlotPool } from "../../src/inference/slot-pool.js";
import { AppError, ErrorCode } from "../../src/shared/errors.js";

test("when slots are free, then acquire takes the preferred one at once", async () => {
  const pool = new SlotPool(["a", "b", "c"]);
  expect(await pool.acquire(10, (free) => free.find((s) => s === "b")!)).toBe("b");
  expect(pool.available).toBe(2);
});

test("when all slots are taken, then waiters get released slots in arrival order", async () => {
  const pool = new SlotPool(["only"]);
  const first = await pool.acquire(1000);
  const order: number[] = [];
  const w1 = pool.acquire(1000).then((s) => (order.push(1), s));
  const w2 = pool.acquire(1000).then((s) => (order.push(2), s));
  expect(pool.waiting).toBe(2);
  pool.release(first);
  pool.release(await w1);
  await w2;
  expect(order).toEqual([1, 2]);
});

test("when no slot frees up in time, then 429 RateLimited with a Retry-After", async () => {
  const pool = new SlotPool(["only"]);
  await pool.acquire(10);
  const err = await pool.acquire(20).catch((e: unknown) => e);
  expect(err).toBeInstanceOf(AppError);
  expect((err as AppError).code).toBe(ErrorCode.RateLimited);
  expect((err as AppError).status).toBe(429);
  expect((err as AppError).retryAfterS).toBe(1);
  expect(pool.waiting).toBe(0);
});

test("when the waiter's signal aborts, then it leaves the queue with the reason", async () => {
  const pool = new SlotPool(["only"]);
  await pool.acquire(10);
  const controller = new AbortController();
  const waiting = pool.acquire(1000, undefined, controller.signal);
  controller.abort(new Error("gone"));
  await expect(waiting).rejects.toThrow("gone");
  expect(pool.waiting).toBe(0);
});

test("when batch work and interactive requests wait, then a freed slot goes to the interactive request first (issue 7, item 2)", async () => {
  const pool = new SlotPool(["only"]);
  const first = await pool.acquire(1000);
  const order: string[] = [];
  const batch1 = pool.acquire(1000, undefined, undefined, true).then((s) => (order.push("batch1"), s));
  const batch2 = pool.acquire(1000, undefined, undefined, true).then((s) => (order.push("batch2"), s));
  const interactive = pool.acquire(1000).then((s) => (order.push("interactive"), s));
  expect(pool.waiting).toBe(3);
  pool.release(first);
  pool.release(await interactive);
  pool.release(await batch1);
  await batch2;
  expect(order).toEqual(["interactive", "batch1", "batch2"]);
});

test("when batch work waits, then a free slot is not taken by a newer batch request ahead of it", async () => {
  const pool = new SlotPool(["a", "b"]);
  const a = await pool.acquire(1000);
  const b = await pool.acquire(1000);
  const queued = pool.acquire(1000, undefined, undefined, true);
  pool.release(a);
  expect(await queued).toBe("a");
  // Free slot, no waiter: batch work takes it at once.
  pool.release(b);
  expect(await pool.acquire(10, undefined, undefined, true)).toBe("b");
});

test("when an interactive request holds a slot, then batch work holds at most the pool's bound and the rest starts when it is done (issue 12, item 3)", async () => {
  const pool = new SlotPool(["a", "b", "c", "d"], 1);
  const started: string[] = [];
  const batch = (name: string) => pool.acquire(1000, undefined, undefined, true).then((s) => (started.push(name), s));
  // No interactive request: batch work takes every free slot.
  const b1 = await batch("b1");
  const b2 = await batch("b2");
  pool.release(b1);
  pool.release(b2);
  started.length = 0;

  const interactive = await pool.acquire(1000);
  const first = await batch("first"); // one batch slot beside it
  const waiting = [batch("second"), batch("third")];
  await new Promise((r) => setImmediate(r));
  expect(started).toEqual(["first"]);
  expect(pool.available).toBe(2); // free slots, held back from batch work
  // An interactive request still gets a free slot at once.
  const other = await pool.acquire(10);
  pool.release(first); // a batch slot back: the next batch item may take it (one beside interactive)
  await new Promise((r) => setImmediate(r));
  expect(started).toEqual(["first", "second"]);
  pool.release(other);
  await new Promise((r) => setImmediate(r));
  expect(started).toEqual(["first", "second"]);
  pool.release(interactive); // no interactive request left: the rest start
  await Promise.all(waiting);
  expect(started).toEqual(["first", "second", "third"]);
});

test("when an interactive request gave its slot back less than the quiet period ago, then batch work stays bounded until the period ends", async () => {
  const pool = new SlotPool(["a", "b", "c"], 1, 50);
  const interactive = await pool.acquire(1000);
  const first = await pool.acquire(1000, undefined, undefined, true);
  let second = false;
  const waiting = pool.acquire(1000, undefined, undefined, true).then((s) => ((second = true), s));
  pool.release(interactive);
  await new Promise((r) => setImmediate(r));
  expect(second).toBe(false); // interactive traffic was just here
  await waiting; // started by the quiet-period timer
  expect(second).toBe(true);
  pool.release(first);
});

test("when a pool is closed (a deleted deployment, issue 9), then waiters and later requests are refused, and whenIdle waits for the slots in use", async () => {
  const pool = new SlotPool(["a", "b"]);
  const a = await pool.acquire(1000);
  const b = await pool.acquire(1000);
  const waiting = pool.acquire(1000);
  let idle = false;
  const idleSeen = pool.whenIdle().then(() => (idle = true));
  pool.close(new Error("deployment deleted"));
  await expect(waiting).rejects.toThrow("deployment deleted");
  await expect(pool.acquire(1000)).rejects.toThrow("deployment deleted");
  pool.release(a);
  await Promise.resolve();
  expect(idle).toBe(false);
  pool.release(b);
  await idleSeen;
  expect(idle).toBe(true);
  await pool.whenIdle(); // at once when nothing is in use
});
