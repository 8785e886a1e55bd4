/**
 * The README's quick start, run as a new user would: its curl block (signup, API key, chat
 * completion) through bash, then its `openai` example file through node, against a real server.
 * Only the base URL is swapped for the test server's.
 */
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import { promisify } from "node:util";
import { packageRoot } from "../src/config/config.js";
import { type TestServer, startTestServer } from "./support/harness.js";

const run = promisify(execFile);
const readme = readFileSync(path.join(packageRoot, "README.md"), "utf8");
const example = path.join(packageRoot, "examples/openai-quickstart.mjs");

/** The first fenced block of `lang` after the heading `heading`. */
function block(heading: string, lang: string): string {
  const section = readme.slice(readme.indexOf(heading));
  const match = new RegExp("```" + lang + "\\n([\\s\\S]*?)```").exec(section);
  if (!match) throw new Error(`no ${lang} block after ${heading}`);
  return match[1];
}

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(() => server.close());

test("when the README's curl block runs, then it signs up, creates a key and gets model text", async () => {
  const script = block("## Try it", "sh").replaceAll("http://localhost:8080", server.url) + '\necho "KEY=$KEY"\n';
  const { stdout } = await run("bash", ["-euo", "pipefail", "-c", script], { timeout: 30_000 });
  const completion = JSON.parse(stdout.slice(0, stdout.lastIndexOf("KEY=")));
  expect(completion.object).toBe("chat.completion");
  expect(completion.choices[0].message.content.length).toBeGreaterThan(10);
  const key = /KEY=(sk_\w{48})/.exec(stdout)?.[1];
  expect(key).toBeDefined();

  // The openai example in the README is the example file, and it runs with that key.
  const code = readFileSync(example, "utf8");
  expect(code).toContain(block("The same with the official", "js"));
  const out = await run("node", [example], {
    cwd: packageRoot,
    timeout: 30_000,
    env: { ...process.env, SWITCHYARD_API_KEY: key, SWITCHYARD_BASE_URL: `${server.url}/v1` },
  });
  const lines = out.stdout.trim().split("\n");
  expect(lines.at(-1)).toBe("64 dimensions");
  expect(lines[0].length).toBeGreaterThan(10);
});
