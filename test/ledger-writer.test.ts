/**
 * One writer of the ledger (issue 25, item 3): every SQL statement that names `credit_ledger`
 * lives in `src/services/ledger/ledger.ts`, and no other module reaches the table through its
 * TypeORM entity, so the ledger's rules (append-only, one entry per source, never below zero,
 * balance and NOTIFY in the same transaction) are kept in one place. The migrations that create
 * the table and the entity that maps it are the only other places that may name it.
 */
import { readFileSync, readdirSync } from "node:fs";
import path from "node:path";

const SRC = path.resolve(import.meta.dirname, "../src");
const WRITER = "services/ledger/ledger.ts";
/** Places that name the table without running SQL on it: its DDL and its entity mapping. */
const NAMES_THE_TABLE = [/^db\/migrations\//, /^entities\/ledger-entry\.entity\.ts$/];
/** Places that may import the entity class (the data source's entity list). */
const MAPS_THE_ENTITY = [/^entities\//];

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) return sources(p);
    return /\.(ts|js|mjs|cjs)$/.test(e.name) ? [p] : [];
  });
}

const files = sources(SRC).map((p) => ({
  rel: path.relative(SRC, p).split(path.sep).join("/"),
  text: readFileSync(p, "utf8"),
}));

test("only the ledger module names credit_ledger in SQL", () => {
  expect(files.some((f) => f.rel === WRITER && /INSERT INTO credit_ledger/.test(f.text))).toBe(true);
  const elsewhere = files
    .filter((f) => f.rel !== WRITER && !NAMES_THE_TABLE.some((re) => re.test(f.rel)))
    .filter((f) => /credit_ledger/i.test(f.text))
    .map((f) => f.rel);
  expect(elsewhere).toEqual([]);
});

test("no module outside the entity list reaches credit_ledger through its entity", () => {
  const users = files
    .filter((f) => !MAPS_THE_ENTITY.some((re) => re.test(f.rel)))
    .filter((f) => /\bLedgerEntryEntity\b/.test(f.text))
    .map((f) => f.rel);
  expect(users).toEqual([]);
});
