/**
 * A newcomer's first hour (issue 27, Checks): the README's "Try it" shell blocks, taken from
 * README.md itself (every `sh` block under the heading, in order) so the README cannot drift, run
 * as written by bash against a real server, twice in a row. The first run finds the server through
 * `PORT` (the blocks' default `BASE`), the second through `BASE`; the second one's signup answers
 * 409 and the blocks log in to the same account instead. Each run must succeed and print what the
 * README says it prints: an API key, a chat completion, and the `openai` example's output.
 */
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import { promisify } from "node:util";
import { packageRoot } from "../src/config/config.js";
import { type TestServer, http, startTestServer } from "./support/harness.js";

const run = promisify(execFile);
const readme = readFileSync(path.join(packageRoot, "README.md"), "utf8");

/** The README's "Try it" section: from its heading to the next second-level heading. */
const tryIt = (() => {
  const start = readme.indexOf("\n## Try it\n");
  if (start < 0) throw new Error("README.md has no '## Try it' section");
  const end = readme.indexOf("\n## ", start + 1);
  return readme.slice(start, end < 0 ? undefined : end);
})();
const blocks = [...tryIt.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]);
/** The `openai` example the section shows, and the file it says it is. */
const shownExample = /```js\n([\s\S]*?)```/.exec(tryIt)?.[1];

/** Printed between two blocks' outputs (on a line of its own) to tell them apart. */
const SEPARATOR = "@@ next block @@";

interface TryItRun {
  /** Each block's standard output. */
  outputs: string[];
  stderr: string;
}

/**
 * Runs the blocks in one bash (variables carry over, as in the reader's terminal), from the
 * repository folder, with `env` added to this process's environment (without BASE or PORT).
 */
async function runTryIt(env: Record<string, string>): Promise<TryItRun> {
  const script = `set -euo pipefail\n${blocks.join(`\nprintf '\\n%s\\n' '${SEPARATOR}'\n`)}`;
  const { BASE: _b, PORT: _p, ...inherited } = process.env;
  const { stdout, stderr } = await run("bash", ["-c", script], {
    cwd: packageRoot,
    timeout: 40_000,
    env: { ...inherited, PATH: `${path.dirname(process.execPath)}:${process.env.PATH}`, ...env },
  });
  // The separator line follows every block but the first (set -e: a failing block ends the run).
  const outputs = stdout.split(`\n${SEPARATOR}\n`);
  return { outputs, stderr };
}

/** What each run must print: an API key, a chat completion and the example's three lines. */
function expectPrinted(result: TryItRun): string {
  expect(result.outputs).toHaveLength(3);
  const [account, curl, example] = result.outputs;
  const key = /^API key: (sk_\w{48})$/m.exec(account)?.[1];
  expect({ account, key: key !== undefined }).toEqual({ account, key: true });

  const completion = JSON.parse(curl);
  expect(completion).toMatchObject({ object: "chat.completion", model: "tinystories-260k" });
  expect(completion.choices[0].message.content.length).toBeGreaterThan(0);
  expect(completion.usage.total_tokens).toBeGreaterThan(0);

  // A completion, a streamed completion, then the embedding's width; the model's text may itself
  // hold line breaks, so only the first and last lines are known.
  const lines = example.trim().split("\n");
  expect(lines.length).toBeGreaterThanOrEqual(3);
  expect(lines[0].length).toBeGreaterThan(0);
  expect(lines.at(-1)).toBe("64 dimensions");
  return key!;
}

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(() => server.close());

test("the section has its three shell blocks, shows the example file as it is, and says what they print", () => {
  expect(blocks).toHaveLength(3);
  expect(blocks[0]).toContain("BASE=${BASE:-http://localhost:${PORT:-8080}}");
  expect(shownExample).toBeDefined();
  expect(readFileSync(path.join(packageRoot, "examples/openai-quickstart.mjs"), "utf8")).toContain(shownExample);
  for (const said of ["`API key: sk_…`", "`409 Email is already registered`", "`chat.completion`", "`64 dimensions`"]) {
    expect(tryIt).toContain(said);
  }
});

test("when the README's Try it blocks run twice in a row, then both runs succeed on one account", async () => {
  const port = new URL(server.url).port;
  // First run: a new account, the server found through PORT alone.
  const first = await runTryIt({ PORT: port });
  const firstKey = expectPrinted(first);
  expect(first.stderr).not.toContain("409");

  // Second run: signup refuses the registered email, the blocks log in instead.
  const second = await runTryIt({ BASE: server.url });
  const secondKey = expectPrinted(second);
  expect(second.stderr).toContain("409 Email is already registered");
  expect(secondKey).not.toBe(firstKey);

  // Both keys belong to the one account the README names.
  const login = await http(server.url, "POST", "/control/v1/auth/login", {
    body: { email: "me@example.com", password: "a-long-password" },
  });
  expect(login.status).toBe(200);
  const keys = await http(server.url, "GET", "/control/v1/auth/api-keys", { token: login.body.access_token });
  expect(keys.body.items.map((k: { name: string; prefix: string }) => [k.name, k.prefix]).sort()).toEqual(
    [
      ["quickstart", firstKey.slice(0, 12)],
      ["quickstart", secondKey.slice(0, 12)],
    ].sort(),
  );
}, 60_000);
