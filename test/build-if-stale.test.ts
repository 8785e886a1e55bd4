/**
 * `npm start` skips an up-to-date build (issue 27, item 5): `tools/build-if-stale.mjs` builds when
 * `dist/` has no stamp or an input is newer than it, and only then. Run on a copy of the script in
 * a folder whose `npm run build` only counts its runs.
 */
import { execFileSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

const SCRIPT = path.resolve(import.meta.dirname, "../tools/build-if-stale.mjs");
let root: string;

beforeAll(() => {
  root = mkdtempSync(path.join(tmpdir(), "build-if-stale-"));
  mkdirSync(path.join(root, "tools"));
  mkdirSync(path.join(root, "src"));
  mkdirSync(path.join(root, "dist"));
  cpSync(SCRIPT, path.join(root, "tools/build-if-stale.mjs"));
  writeFileSync(path.join(root, "src/main.ts"), "export {};\n");
  writeFileSync(
    path.join(root, "package.json"),
    JSON.stringify({
      name: "x",
      private: true,
      scripts: { build: "node -e \"require('fs').appendFileSync('builds', 'b')\"" },
    }),
  );
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

const run = (env: NodeJS.ProcessEnv = {}) =>
  execFileSync(process.execPath, ["tools/build-if-stale.mjs"], { cwd: root, env: { ...process.env, ...env } });
const builds = () => {
  try {
    return readFileSync(path.join(root, "builds"), "utf8").length;
  } catch {
    return 0;
  }
};

test("when there is no build yet, then it builds; when nothing changed since, then it does not", () => {
  run();
  expect(builds()).toBe(1);
  run();
  expect(builds()).toBe(1);
});

test("when a source file is newer than the build, then it builds again", () => {
  const later = new Date(Date.now() + 5_000);
  utimesSync(path.join(root, "src/main.ts"), later, later);
  const before = builds();
  run();
  expect(builds()).toBe(before + 1);
  run();
  expect(builds()).toBe(before + 1);
});

test("when SWITCHYARD_BUILD=always, then it builds even when up to date", () => {
  const before = builds();
  run({ SWITCHYARD_BUILD: "always" });
  expect(builds()).toBe(before + 1);
});
