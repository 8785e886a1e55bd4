/** Column transformers shared by entities. */
import type { ValueTransformer } from "typeorm";

/** PostgreSQL `bigint` ⇄ JS `bigint` (pg returns int8 as a string; money never goes through a float). */
export const bigintTransformer: ValueTransformer = {
  to: (value: bigint | null | undefined) => (value === null || value === undefined ? value : value.toString()),
  from: (value: string | null) => (value === null ? null : BigInt(value)),
};
