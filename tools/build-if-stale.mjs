#!/usr/bin/env node
/**
 * `npm start`, `npm run worker` and `npm run models` build first (`pre…` scripts); this skips the
 * build when `dist/` is newer than every input (issue 27, item 5: a warm start should not spend
 * ~10 s in tsc and vite). Inputs: `src/`, `dashboard/`, `graphiql/` (not their `node_modules`),
 * the package and lock files and the TypeScript configurations. A build that succeeds writes
 * `dist/.build-stamp`; a checkout, pull or edit makes an input newer than it, and the next start
 * builds again.
 * `SWITCHYARD_BUILD=always` builds anyway. Exits with the build's status.
 */
import { spawnSync } from "node:child_process";
import { readdirSync, statSync, utimesSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const stamp = path.join(root, "dist", ".build-stamp");
const inputs = [
  "src",
  "dashboard",
  "graphiql",
  "package.json",
  "package-lock.json",
  "tsconfig.json",
  "tsconfig.build.json",
];

/** Newest modification time (ms) under `p`, skipping `node_modules` and `dist` folders. */
function newest(p) {
  let stat;
  try {
    stat = statSync(p);
  } catch {
    return 0;
  }
  if (!stat.isDirectory()) return stat.mtimeMs;
  let max = stat.mtimeMs;
  for (const name of readdirSync(p)) {
    if (name === "node_modules" || name === "dist") continue;
    max = Math.max(max, newest(path.join(p, name)));
  }
  return max;
}

const built = (() => {
  try {
    return statSync(stamp).mtimeMs;
  } catch {
    return 0;
  }
})();
const changed = Math.max(...inputs.map((i) => newest(path.join(root, i))));
if (process.env.SWITCHYARD_BUILD !== "always" && built > 0 && changed < built) process.exit(0);

const npm = process.platform === "win32" ? "npm.cmd" : "npm";
const result = spawnSync(npm, ["run", "build", "--silent"], { cwd: root, stdio: "inherit" });
if (result.status !== 0) process.exit(result.status ?? 1);
writeFileSync(stamp, `${new Date().toISOString()}\n`);
// Never older than the inputs it covers (a file dated in the future would otherwise rebuild each start).
// (A second past it: a Date has whole milliseconds and utimes converts them through floating-point
// seconds, so `changed + 1` could come back equal to `changed`.)
const at = new Date(Math.max(Date.now(), Math.ceil(changed) + 1000));
utimesSync(stamp, at, at);
