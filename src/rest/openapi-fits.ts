/**
 * Compile-time ties between the documented shapes and the code that builds each answer (issue
 * 13, item 1): a field renamed or retyped in the code fails `tsc` where its shape is declared.
 */
import { z } from "zod";

/** Compiles only when `Actual` (what the code answers) is assignable to `Documented`. */
export type Fits<Actual extends Documented, Documented> = [Actual, Documented];

/** An integer (`type: integer` in the document). */
export const int = () => z.number().int();

/** What `JSON.stringify` makes of `T` as far as these shapes care: dates become ISO strings. */
export type Serialized<T> = T extends Date
  ? string
  : T extends Array<infer U>
    ? Array<Serialized<U>>
    : T extends object
      ? { [K in keyof T]: Serialized<T[K]> }
      : T;
