/**
 * The README stands alone (issue 27, item 3): it fits a newcomer (at most 300 lines), every
 * relative link of README.md and docs/*.md leads to a file of the repository (and a heading there,
 * when it names one), no page points outside the repository or cites what a reader cannot follow,
 * and every docs page is reachable from the README. The examples of docs/ that the README's
 * tests do not run are run here against real servers as written: the GraphQL query, mutation and
 * subscription, the decisions request, and the vLLM recipe (its catalog and endpoint file, with a
 * second Switchyard standing in for vLLM).
 */
import { execFile, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, readdirSync, statSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { loadConfig, packageRoot } from "../src/config/config.js";
import { type TestServer, createTestCaller, eventually, http, startTestServer } from "./support/harness.js";
import { writeEditedCatalog } from "./support/test-catalog.js";

const run = promisify(execFile);
const DOCS = path.join(packageRoot, "docs");
const pages = [
  "README.md",
  ...readdirSync(DOCS)
    .filter((f) => f.endsWith(".md"))
    .map((f) => `docs/${f}`),
];
const read = (page: string) => readFileSync(path.join(packageRoot, page), "utf8");

/** The anchor GitHub gives a heading: lowercase, punctuation dropped, spaces to hyphens. */
function slug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, "")
    .replace(/\s/g, "-");
}

/** The anchors of a Markdown page's headings (outside fenced blocks). */
function anchors(text: string): Set<string> {
  const outside = text.replace(/^```[\s\S]*?^```/gm, "");
  return new Set([...outside.matchAll(/^#{1,6} (.+)$/gm)].map((m) => slug(m[1])));
}

/** `[text](target)` links of a page, outside fenced blocks. */
function links(text: string): string[] {
  const outside = text.replace(/^\s*```[\s\S]*?^\s*```/gm, "");
  return [...outside.matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1]);
}

/** The section of `text` under `heading` (to the next heading of the same or a higher level). */
function section(text: string, heading: string): string {
  const level = /^#+/.exec(heading)![0].length;
  const start = text.indexOf(`\n${heading}\n`);
  if (start < 0) throw new Error(`no heading ${heading}`);
  const rest = text.slice(start + heading.length + 2);
  const next = new RegExp(`^#{1,${level}} `, "m").exec(rest);
  return next ? rest.slice(0, next.index) : rest;
}

/** The fenced blocks of `lang` in `text`, without the indentation of a list item. */
function blocks(text: string, lang: string): string[] {
  return [...text.matchAll(new RegExp("^( *)```" + lang + "\\n([\\s\\S]*?)^\\1```", "gm"))].map((m) =>
    m[2].replace(new RegExp(`^${m[1]}`, "gm"), ""),
  );
}

describe("the pages", () => {
  test("the README has at most 300 lines and a table of contents whose entries are its headings", () => {
    const readme = read("README.md");
    expect(readme.split("\n").length).toBeLessThanOrEqual(300);
    const contents = section(readme, "## Contents");
    const entries = [...contents.matchAll(/\]\(#([^)]+)\)/g)].map((m) => m[1]);
    expect(entries.length).toBeGreaterThanOrEqual(5);
    const headings = [...readme.matchAll(/^## (.+)$/gm)].map((m) => slug(m[1])).filter((s) => s !== "contents");
    expect(entries).toEqual(headings);
  });

  test.each(pages)("every relative link of %s leads to a file of the repository, and to a heading there", (page) => {
    const text = read(page);
    const broken: string[] = [];
    for (const target of links(text)) {
      if (/^[a-z]+:/i.test(target)) continue; // https:, mailto:
      const [file, anchor] = target.split("#");
      const resolved = file
        ? path.resolve(path.dirname(path.join(packageRoot, page)), file)
        : path.join(packageRoot, page);
      if (!resolved.startsWith(packageRoot + path.sep) || !existsSync(resolved)) {
        broken.push(`${target}: no such file in the repository`);
        continue;
      }
      if (anchor && resolved.endsWith(".md") && !anchors(readFileSync(resolved, "utf8")).has(anchor)) {
        broken.push(`${target}: no such heading`);
      }
    }
    expect(broken).toEqual([]);
  });

  test.each(pages)("%s points nowhere outside the repository and cites nothing a reader cannot follow", (page) => {
    const text = read(page);
    const found = [
      /\.\.\/shared/,
      /\/work\//,
      /\bissue \d+/i,
      /\bDESIGN\b/,
      /§/,
      /\bthe spec\b/i,
      /\bspec['’]s\b/i,
      /interface\.md/,
    ].flatMap((re) => (re.test(text) ? [String(re)] : []));
    expect(found).toEqual([]);
  });

  test("every docs page is linked from the README", () => {
    const linked = new Set(links(read("README.md")).map((l) => l.split("#")[0]));
    const pagesOfDocs = readdirSync(DOCS).filter((f) => f.endsWith(".md"));
    expect(pagesOfDocs.length).toBeGreaterThanOrEqual(10);
    expect(pagesOfDocs.filter((f) => !linked.has(`docs/${f}`))).toEqual([]);
  });

  test("docs/graphql.md names every query, mutation and subscription of schema.graphql", () => {
    const schema = read("schema.graphql").replace(/"""[\s\S]*?"""/g, "");
    const fields = ["Query", "Mutation", "Subscription"].flatMap((type) => {
      const body = new RegExp(`^type ${type} \\{([\\s\\S]*?)^\\}`, "m").exec(schema)?.[1] ?? "";
      return [...body.matchAll(/^ {2}(\w+)[(:]/gm)].map((m) => m[1]);
    });
    expect(fields.length).toBeGreaterThanOrEqual(40);
    const page = read("docs/graphql.md");
    expect(fields.filter((f) => !page.includes(`\`${f}\``))).toEqual([]);
  });

  test("the links checks catch a broken link and a path outside the repository", () => {
    const fake = "see [x](docs/nothing.md), [y](README.md#no-such-heading) and `../shared/models`";
    const readme = read("README.md");
    expect(links(fake)).toEqual(["docs/nothing.md", "README.md#no-such-heading"]);
    expect(existsSync(path.join(packageRoot, "docs/nothing.md"))).toBe(false);
    expect(anchors(readme).has("no-such-heading")).toBe(false);
    expect(anchors(readme).has("try-it")).toBe(true);
    expect(/\.\.\/shared/.test(fake)).toBe(true);
  });
});

describe("the examples of docs/, run as written", () => {
  let server: TestServer;
  let caller: Awaited<ReturnType<typeof createTestCaller>>;
  beforeAll(async () => {
    server = await startTestServer();
    caller = await createTestCaller(server.url);
  });
  afterAll(() => server.close());

  /** Runs a shell block with the README's variables set; @returns its output as JSON. */
  async function runBlock(block: string, env: Record<string, string> = {}): Promise<any> {
    const { stdout } = await run("bash", ["-euo", "pipefail", "-c", block], {
      cwd: packageRoot,
      timeout: 30_000,
      env: { ...process.env, BASE: server.url, TOKEN: caller.token, KEY: caller.key, ...env },
    });
    return JSON.parse(stdout);
  }

  test("when the GraphQL query and mutation run, then they answer data without errors", async () => {
    const page = read("docs/graphql.md");
    const [query] = blocks(section(page, "## A query"), "sh");
    const answer = await runBlock(query);
    expect(answer.errors).toBeUndefined();
    expect(answer.data.me).toEqual({ email: caller.email, role: "owner", teamId: expect.any(String) });
    expect(answer.data.models.map((m: { id: string }) => m.id)).toContain("tinystories-260k");

    const [mutation] = blocks(section(page, "## A mutation"), "sh");
    const created = await runBlock(mutation);
    expect(created.errors).toBeUndefined();
    expect(created.data.createApiKey.plaintext).toMatch(/^sk_\w{48}$/);
  });

  test("when the subscription example runs, then it prints the next completion event", async () => {
    const page = section(read("docs/graphql.md"), "## A subscription");
    const file = path.join(packageRoot, "examples/graphql-events.mjs");
    expect(readFileSync(file, "utf8")).toContain(blocks(page, "js")[0]);
    const [command] = blocks(page, "sh");
    expect(command.trim()).toBe("SWITCHYARD_BASE_URL=$BASE SWITCHYARD_API_KEY=$KEY node examples/graphql-events.mjs");
    // As written, with a count so that it ends after the first event.
    const child = spawn("bash", ["-c", `${command.trim()} 1`], {
      cwd: packageRoot,
      env: { ...process.env, BASE: server.url, KEY: caller.key },
    });
    let out = "";
    child.stdout.on("data", (b: Buffer) => (out += b));
    child.stderr.on("data", (b: Buffer) => (out += b));
    const exited = new Promise<number | null>((resolve) => child.on("exit", resolve));
    let done = false;
    void exited.then(() => (done = true));
    try {
      expect(await eventually(async () => out.includes("subscribed") || done, 15_000)).toBe(true);
      // The subscription starts just after the socket is acknowledged: ask until an event comes.
      for (const deadline = Date.now() + 20_000; !done && Date.now() < deadline;) {
        await http(server.url, "POST", "/v1/chat/completions", {
          token: caller.key,
          body: { model: "tinystories-260k", messages: [{ role: "user", content: "Hi" }], max_tokens: 4 },
        });
        await new Promise((resolve) => setTimeout(resolve, 300));
      }
      expect({ code: await exited, out }).toEqual({ code: 0, out: expect.any(String) });
      expect(out).toMatch(/^event: completed tinystories-260k \d+ tokens, \d+ micro-USD$/m);
    } finally {
      child.kill();
    }
  }, 60_000);

  test("when the decisions request runs, then every question is answered with probabilities", async () => {
    const [request] = blocks(section(read("docs/decisions.md"), "## The request and the answer"), "sh");
    const answer = await runBlock(request);
    expect(answer.model).toBe("tinystories-260k");
    expect(answer.answers.mood).toMatchObject({ type: "choice", choice: expect.any(String) });
    expect(answer.answers.length).toMatchObject({ type: "score", score: expect.any(Number) });
    expect(answer.answers.has_dog).toMatchObject({ type: "noul", noul: expect.any(Number) });
  });

  describe("the vLLM recipe", () => {
    const recipe = section(read("docs/models.md"), "## A vLLM recipe");
    let upstream: TestServer;
    let gateway: TestServer;
    afterAll(async () => {
      await gateway?.close();
      await upstream?.close();
    });

    test("when its catalog and endpoint file are used as written, then a chat completion goes through the upstream", async () => {
      const [catalogJson, upstreamsJson] = blocks(recipe, "json");
      const catalog = JSON.parse(catalogJson);
      const endpoints = JSON.parse(upstreamsJson);
      const upstreamModel = catalog.models[0].engine.upstream_model as string;
      expect(endpoints[0].models).toEqual([upstreamModel]);

      // The stand-in for vLLM: a Switchyard serving the test model under vLLM's model name.
      upstream = await startTestServer({
        catalogPath: writeEditedCatalog((c) => {
          c.models.find((m) => m.id === "tinystories-260k")!.id = upstreamModel;
          c.default_model = upstreamModel;
        }),
      });
      const account = await createTestCaller(upstream.url);

      // The files as the recipe writes them; only the endpoint's address and key are the stand-in's.
      const dir = mkdtempSync(path.join(os.tmpdir(), "switchyard-vllm-recipe-"));
      writeFileSync(path.join(dir, "catalog.vllm.json"), catalogJson);
      writeFileSync(
        path.join(dir, "upstreams.json"),
        JSON.stringify(endpoints.map((e: object) => ({ ...e, base_url: `${upstream.url}/v1`, api_key: account.key }))),
      );
      // The start command's settings, read as the start reads them.
      const start = blocks(recipe, "sh").find((b) => b.includes("npm start"))!;
      const env = Object.fromEntries(
        [...start.matchAll(/\b([A-Z_]+)=(\S+)/g)].map(([, name, value]) => [name, path.resolve(dir, value)]),
      );
      expect(Object.keys(env).sort()).toEqual(["SWITCHYARD_CATALOG", "SWITCHYARD_UPSTREAMS_FILE"]);
      const config = loadConfig(env, { dataDir: dir, jwtSecret: "x".repeat(32) });
      expect(config.upstreams.map((u) => u.name)).toEqual(["vllm-1"]);
      expect(statSync(config.catalogPath).isFile()).toBe(true);

      gateway = await startTestServer({ catalogPath: config.catalogPath, upstreamsFile: config.upstreamsFile });
      const caller = await createTestCaller(gateway.url);
      const call = blocks(recipe, "sh").find((b) => b.includes("/v1/chat/completions"))!;
      const { stdout } = await run("bash", ["-euo", "pipefail", "-c", call], {
        timeout: 30_000,
        env: { ...process.env, BASE: gateway.url, KEY: caller.key },
      });
      const completion = JSON.parse(stdout);
      expect(completion).toMatchObject({ object: "chat.completion", model: catalog.models[0].id });
      expect(completion.usage.total_tokens).toBeGreaterThan(0);
      // The upstream did the work, under its own model name.
      const [record] = await upstream.db<{ model: string }>(
        "SELECT model FROM activity ORDER BY created_at DESC LIMIT 1",
      );
      expect(record.model).toBe(upstreamModel);
    }, 90_000);
  });
});
