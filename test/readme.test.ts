/**
 * The examples of the README and of docs/, run as a reader would, against a real server: the
 * structured-output and tool-calling example files (shown in docs/structured-outputs-and-tools.md)
 * and the README's "Use a real model" curl and openai examples (issue 17, item 6), with the test
 * model's file standing in for the real models' (which cannot be downloaded here). The README's
 * "Try it" blocks run in test/first-hour.test.ts.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { promisify } from "node:util";
import { packageRoot } from "../src/config/config.js";
import { type TestServer, createTestCaller, startTestServer } from "./support/harness.js";
import { writeEditedCatalog } from "./support/test-catalog.js";

const run = promisify(execFile);
const readme = readFileSync(path.join(packageRoot, "README.md"), "utf8");
const toolsPage = readFileSync(path.join(packageRoot, "docs/structured-outputs-and-tools.md"), "utf8");

/** The first fenced block of `lang` after the heading `heading` of `text`. */
function block(text: string, heading: string, lang: string): string {
  expect(text).toContain(heading);
  const section = text.slice(text.indexOf(heading));
  const match = new RegExp("```" + lang + "\\n([\\s\\S]*?)```").exec(section);
  if (!match) throw new Error(`no ${lang} block after ${heading}`);
  return match[1];
}

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(() => server.close());

/**
 * Checks that the section `heading` of docs/structured-outputs-and-tools.md shows (part of)
 * `examples/<name>`, then runs that file with a new caller's key against the test server.
 * @returns what it printed.
 */
async function runExample(name: string, heading: string): Promise<{ stdout: string }> {
  const file = path.join(packageRoot, "examples", name);
  expect(readFileSync(file, "utf8")).toContain(block(toolsPage, heading, "js"));
  const { key } = await createTestCaller(server.url);
  return run("node", [file], {
    cwd: packageRoot,
    timeout: 30_000,
    env: { ...process.env, SWITCHYARD_API_KEY: key, SWITCHYARD_BASE_URL: `${server.url}/v1` },
  });
}

test("when the docs' structured-output example runs, then it prints a parsed object of its schema", async () => {
  const out = await runExample("structured-output.mjs", "## Structured outputs");
  expect(out.stdout).toMatch(/kind: '(cat|dog|bird)'/);
  expect(out.stdout).toMatch(/age: \d+/);
});

test("when the docs' tool-calling example runs, then the forced function is called with parsed arguments", async () => {
  const out = await runExample("tool-calling.mjs", "## Tool calling");
  expect(out.stdout).toMatch(/^called get_weather with \{"city":".*","unit":"(celsius|fahrenheit)"\}$/m);
  expect(out.stdout).toMatch(/^result: It is sunny in /m);
});

describe("the README's 'Use a real model' examples", () => {
  // The real models' files cannot be downloaded here: the test model's file stands in for them
  // under their ids, so what is checked is that the README's curl and openai code runs as written.
  const standIn = writeEditedCatalog((c) => {
    for (const m of c.models) {
      if (m.id !== "qwen2.5-0.5b-instruct" && m.id !== "nomic-embed-text-v1.5") continue;
      m.engine = { type: "llama_cpp", file: "stories260K.gguf", context_size: 512 };
      if (m.id === "nomic-embed-text-v1.5") (m.capabilities as { dimensions: number }).dimensions = 64;
    }
  });
  let real: TestServer;
  beforeAll(async () => {
    real = await startTestServer({ catalogPath: standIn });
  });
  afterAll(() => real.close());

  test("when its curl and openai examples run, then the chat answers and the embeddings come back", async () => {
    const { key } = await createTestCaller(real.url);
    const section = readme.slice(readme.indexOf("## Use a real model"), readme.indexOf("## Dashboard"));
    const curl = /```sh\n(curl [\s\S]*?)```/.exec(section)?.[1];
    expect(curl).toContain('"model":"qwen2.5-0.5b-instruct"');
    const { stdout } = await run("bash", ["-euo", "pipefail", "-c", curl!], {
      timeout: 30_000,
      env: { ...process.env, BASE: real.url, KEY: key },
    });
    const completion = JSON.parse(stdout);
    expect(completion).toMatchObject({ object: "chat.completion", model: "qwen2.5-0.5b-instruct" });

    const js = /```js\n([\s\S]*?)```/.exec(section)?.[1];
    expect(js).toContain('model: "nomic-embed-text-v1.5"');
    const dir = mkdtempSync(path.join(packageRoot, ".readme-real-"));
    try {
      const file = path.join(dir, "example.mjs");
      writeFileSync(file, js!);
      const out = await run("node", [file], {
        timeout: 60_000,
        env: { ...process.env, SWITCHYARD_BASE_URL: `${real.url}/v1`, SWITCHYARD_API_KEY: key },
      });
      const lines = out.stdout.trim().split("\n");
      expect(lines.at(-1)).toBe("[ 64, 64 ]"); // 768 each with the real model
      expect(out.stdout).toContain("prompt_tokens");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 90_000);
});
