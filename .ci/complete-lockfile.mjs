// Adds lockfile entries for other platforms' optional packages that this machine's npm registry
// does not serve (it 404s e.g. @swc/core-darwin-arm64), so that `npm ci` accepts the lockfile.
// npm cannot record what it cannot fetch, and then `npm ci` refuses the lockfile as out of sync.
// A stub `{version, optional: true}` satisfies the check; on install npm skips the package (a
// failed optional fetch), exactly as it skips other platforms' binaries anyway. npm keeps the
// stubs on later installs. Run after adding dependencies: `node .ci/complete-lockfile.mjs`;
// `--check` only reports (exit 1 when stubs are missing).
import { readFileSync, writeFileSync } from "node:fs";

const file = new URL("../package-lock.json", import.meta.url);
const lock = JSON.parse(readFileSync(file, "utf8"));
const missing = [];
for (const [location, entry] of Object.entries(lock.packages)) {
  for (const [name, version] of Object.entries(entry.optionalDependencies ?? {})) {
    const nested = location ? `${location}/node_modules/${name}` : `node_modules/${name}`;
    if (!lock.packages[nested] && !lock.packages[`node_modules/${name}`])
      missing.push([`node_modules/${name}`, version]);
  }
}
if (process.argv.includes("--check")) {
  if (missing.length > 0) {
    console.error(`package-lock.json lacks ${missing.length} optional packages: run node .ci/complete-lockfile.mjs`);
    process.exit(1);
  }
} else {
  for (const [key, version] of missing) lock.packages[key] = { version, optional: true };
  writeFileSync(file, JSON.stringify(lock, null, 2) + "\n");
  console.log(`added ${missing.length} optional package stubs`);
}
