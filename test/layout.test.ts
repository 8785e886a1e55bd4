/**
 * The house's layout (issue 25, item 1, and its Checks), for what dependency-cruiser cannot see:
 * a file nothing imports yet. Every service file sits in one of the domain folders that
 * `.dependency-cruiser.domains.cjs` orders (dependency-cruiser enforces that order), none directly in `src/services`; each domain says
 * what it owns (a README); no source file is over 600 lines.
 */
import { existsSync, readFileSync, readdirSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const ROOT = path.resolve(import.meta.dirname, "..");
const SERVICES = path.join(ROOT, "src/services");
const DOMAINS = createRequire(import.meta.url)(path.join(ROOT, ".dependency-cruiser.domains.cjs")) as string[];

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = path.join(dir, name);
    return statSync(p).isDirectory() ? files(p) : [p];
  });
}

test("when src/services is listed, then it holds only the ordered domain folders, each with a README", () => {
  const entries = readdirSync(SERVICES);
  const loose = entries.filter((e) => !statSync(path.join(SERVICES, e)).isDirectory() && e !== "README.md");
  expect(loose).toEqual([]);
  expect(entries.filter((e) => !loose.includes(e) && e !== "README.md").sort()).toEqual([...DOMAINS].sort());
  for (const domain of DOMAINS)
    expect([domain, existsSync(path.join(SERVICES, domain, "README.md"))]).toEqual([domain, true]);
});

test("when every source file is measured, then none is over 600 lines", () => {
  const long = files(path.join(ROOT, "src"))
    .filter((f) => f.endsWith(".ts"))
    .map((f) => [path.relative(ROOT, f), readFileSync(f, "utf8").split("\n").length] as const)
    .filter(([, lines]) => lines > 601);
  expect(long).toEqual([]);
});
