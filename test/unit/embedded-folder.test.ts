/**
 * The embedded PostgreSQL's data folder must be reachable by the `postgres` user when Switchyard
 * runs as root (issue 27, item 9): a folder above it that others cannot enter is named, with the
 * fix, before initdb would fail with a bare "Permission denied".
 */
import { chmodSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { EmbeddedPostgresError, closedAncestor, startEmbeddedPostgres } from "../../src/db/embedded.js";

let root: string;
beforeEach(() => {
  root = mkdtempSync(path.join(tmpdir(), "embedded-folder-"));
  chmodSync(root, 0o755);
});
afterEach(() => {
  chmodSync(root, 0o755);
  rmSync(root, { recursive: true, force: true });
});

test("when every folder above is open to others, then none is closed", () => {
  mkdirSync(path.join(root, "a/b"), { recursive: true });
  expect(closedAncestor(path.join(root, "a/b"))).toBeNull();
});

test("when a folder above has no search bit for others, then it is the one named", () => {
  mkdirSync(path.join(root, "a/b"), { recursive: true });
  chmodSync(path.join(root, "a"), 0o700);
  expect(closedAncestor(path.join(root, "a/b"))).toBe(path.join(root, "a"));
});

// PostgreSQL runs as another user only when Switchyard runs as root (CI and this machine do).
const asRoot = process.getuid?.() === 0;
(asRoot ? test : test.skip)(
  "when run as root under a folder the postgres user cannot enter, then the start names that folder and the fix",
  async () => {
    const closed = path.join(root, "home");
    mkdirSync(path.join(closed, "app/.data"), { recursive: true });
    chmodSync(closed, 0o700);
    const start = startEmbeddedPostgres({ dir: path.join(closed, "app/.data/pg"), database: "x" });
    await expect(start).rejects.toBeInstanceOf(EmbeddedPostgresError);
    await expect(start).rejects.toThrow(`cannot enter ${closed} (mode 700)`);
    await expect(start).rejects.toThrow(`chmod o+x ${closed}`);
  },
);
