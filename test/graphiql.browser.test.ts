/**
 * GraphiQL at `/graphql` (issue 27, item 7) in a real browser: Debian's headless Chromium driven by
 * playwright-core against a real test server, as test/dashboard.browser.test.ts does. A person
 * signed in on the dashboard opens `/graphql` in the same tab and runs the starter query as
 * themselves; a fresh browser gets a 401 until an API key is pasted into the page's field, then
 * runs the query and the `completionEvents` subscription over graphql-ws (the event of a real
 * completion arrives), and an `Authorization` header in GraphiQL's headers editor wins over the
 * field. Any request whose host is not the server's is aborted and fails the test (no CDN, no
 * fonts from elsewhere), as do script errors and CSP violations. Screenshots go to a folder the
 * test prints.
 *
 * Chromium: `SWITCHYARD_CHROMIUM`, else `/usr/bin/chromium`. The page and the dashboard are built
 * (Vite) when missing or older than their sources.
 */
import { existsSync, mkdtempSync, readdirSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { type Browser, type BrowserContext, type Page, chromium } from "playwright-core";
import { DASHBOARD_DIR } from "../src/rest/dashboard.js";
import { GRAPHIQL_DIR } from "../src/rest/graphiql.js";
import {
  CHAT_MODEL,
  type TestServer,
  createTestApiKey,
  createTestUser,
  eventually,
  http,
  openaiClient,
  startTestServer,
} from "./support/harness.js";
import { ensureViteBuilt } from "./support/vite-build.js";

const CHROMIUM = process.env.SWITCHYARD_CHROMIUM ?? "/usr/bin/chromium";
const VIEWPORT = { width: 1280, height: 900 };

let server: TestServer;
let browser: Browser;
let shots: string;
let shotCount = 0;
const problems: string[] = [];
const foreign: string[] = [];

beforeAll(async () => {
  if (!existsSync(CHROMIUM)) {
    throw new Error(
      `Chromium not found at ${CHROMIUM}: install Debian's chromium (sudo apt-get install -y chromium; ` +
        `.ci/run does it) or point SWITCHYARD_CHROMIUM at a Chromium binary`,
    );
  }
  await ensureViteBuilt("dashboard", DASHBOARD_DIR);
  await ensureViteBuilt("graphiql", GRAPHIQL_DIR);
  server = await startTestServer();
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    // Containers: /dev/shm is small, and as root Chromium starts only without its sandbox.
    args: ["--disable-dev-shm-usage", ...(process.getuid?.() === 0 ? ["--no-sandbox"] : [])],
  });
  shots = mkdtempSync(path.join(os.tmpdir(), "switchyard-graphiql-shots-"));
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await server?.close();
  if (shots) console.log(`GraphiQL screenshots (${shotCount}): ${shots}\n  ${readdirSync(shots).sort().join("\n  ")}`);
});

/**
 * A browser context whose requests may go to the test server only: any other host is aborted and
 * recorded, as is a WebSocket elsewhere, a script error or a console error (CSP violations are).
 */
async function isolatedContext(): Promise<{ context: BrowserContext; page: Page }> {
  const own = new URL(server.url).host;
  const context = await browser.newContext({ viewport: VIEWPORT });
  await context.route("**/*", (route) => {
    const url = new URL(route.request().url());
    if ((url.protocol === "http:" || url.protocol === "https:") && url.host !== own) {
      foreign.push(url.href);
      return route.abort("blockedbyclient");
    }
    return route.continue();
  });
  const page = await context.newPage();
  page.setDefaultTimeout(15_000);
  page.on("websocket", (ws) => {
    if (new URL(ws.url()).host !== own) foreign.push(ws.url());
  });
  page.on("pageerror", (err) => problems.push(`pageerror: ${err.message}`));
  page.on("console", (msg) => {
    // A refused operation (401) logs its status; CSP violations and script errors do not pass.
    if (msg.type() === "error" && !/status of 4\d\d/.test(msg.text())) problems.push(`console: ${msg.text()}`);
  });
  return { context, page };
}

async function shot(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: path.join(shots, `${String(++shotCount).padStart(2, "0")}-${name}.png`) });
}

/** The response pane's text (Monaco renders spaces as no-break spaces). */
async function responseText(page: Page): Promise<string> {
  const text = (await page.locator(".graphiql-response").textContent()) ?? "";
  return text.replace(/\u00a0/g, " ");
}

/** Waits until the response pane contains every one of `parts`. */
async function responseShows(page: Page, ...parts: string[]): Promise<string> {
  let text = "";
  const shown = await eventually(async () => {
    text = await responseText(page);
    return parts.every((p) => text.includes(p));
  }, 15_000);
  if (!shown) throw new Error(`the response pane never showed ${JSON.stringify(parts)}; it shows: ${text}`);
  return text;
}

/** Opens `/graphql` and waits until GraphiQL has loaded the schema (the Docs panel can open). */
async function openGraphiql(page: Page): Promise<void> {
  await page.goto(`${server.url}/graphql`);
  await page.locator(".graphiql-container").waitFor();
  await page.locator(".graphiql-query-editor .monaco-editor").waitFor();
}

/** Runs the active tab's operation with GraphiQL's ▶ button. */
async function run(page: Page): Promise<void> {
  await page.locator("button.graphiql-execute-button").click();
}

async function teamName(token: string): Promise<string> {
  const res = await http(server.url, "POST", "/graphql", { body: { query: "{ team { name } }" }, token });
  return res.body.data.team.name as string;
}

test("signed in on the dashboard, /graphql in the same tab runs the starter query as that person, with nothing loaded from elsewhere", async () => {
  const user = await createTestUser(server.url, { name: "Gia GraphiQL" });
  const team = await teamName(user.token);
  const { context, page } = await isolatedContext();
  try {
    await page.goto(`${server.url}/dashboard/`);
    await page.getByLabel("Email").fill(user.email);
    await page.getByLabel("Password").fill(user.password);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("heading", { level: 1, name: "Usage" }).waitFor();

    await openGraphiql(page);
    const field = page.getByLabel("Token or API key");
    expect(await field.inputValue()).not.toBe("");
    await page.getByText("From your dashboard sign-in.").waitFor();
    await run(page);
    const shown = await responseShows(page, `"email": "${user.email}"`, `"name": "${team}"`);
    expect(shown).toContain(`"role": "owner"`);
    await shot(page, "dashboard-session");
    // The Docs panel: the schema came through the same fetcher.
    await page.getByRole("button", { name: /Show Documentation Explorer/i }).click();
    await page.getByText("Root Types").waitFor();
    await shot(page, "docs");
  } finally {
    await context.close();
  }
  expect({ problems, foreign }).toEqual({ problems: [], foreign: [] });
}, 90_000);

test("a fresh browser gets a 401 until an API key is pasted; then the query and the graphql-ws subscription run as its team, and the headers editor wins over the field", async () => {
  const user = await createTestUser(server.url);
  const key = await createTestApiKey(server.url, user.token, "graphiql");
  const team = await teamName(user.token);
  const { context, page } = await isolatedContext();
  try {
    await openGraphiql(page);
    const field = page.getByLabel("Token or API key");
    expect(await field.inputValue()).toBe("");
    await page.getByText("None: sign in on the dashboard, or paste an API key.").waitFor();
    await run(page);
    await responseShows(page, `"status_code": 401`);
    await shot(page, "no-credential");

    await field.fill(key.key);
    await page.getByText("Kept for this tab.").waitFor();
    await run(page);
    await responseShows(page, `"name": "${team}"`, `"email": "${user.email}"`);
    await shot(page, "api-key");

    // The second starter tab: the subscription, over graphql-ws with the key in connectionParams.
    await page.getByRole("tab", { name: "Events" }).click();
    await page.locator(".graphiql-query-editor", { hasText: "subscription Events" }).waitFor();
    await run(page);
    if (!(await eventually(async () => server.app.events.subscribers > 0, 10_000)))
      throw new Error(`the subscription did not start; the response pane shows: ${await responseText(page)}`);
    const completion = await openaiClient(server.url, key.key).chat.completions.create({
      model: CHAT_MODEL,
      messages: [{ role: "user", content: "Once upon a time" }],
      max_tokens: 4,
    });
    const responseId = completion.id.replace(/^chatcmpl-/, "");
    await responseShows(page, `"model": "${CHAT_MODEL}"`, `"status": "completed"`);
    expect(await responseText(page)).toContain(`"responseId": "${responseId}"`);
    await shot(page, "subscription");
    await run(page); // stops the subscription
    expect(await eventually(async () => server.app.events.subscribers === 0, 10_000)).toBe(true);

    // An Authorization header written in the headers editor replaces the field's key.
    await page.getByRole("tab", { name: "Team" }).click();
    await page.locator(".graphiql-query-editor", { hasText: "query Team" }).waitFor();
    await page.getByRole("button", { name: "Headers" }).click();
    await page.locator(".graphiql-editor-tool .monaco-editor").last().click();
    await page.keyboard.type('{"Authorization": "Bearer sk_not_a_key"}');
    await run(page);
    await responseShows(page, `"status_code": 401`);
    await shot(page, "headers-editor");
  } finally {
    await context.close();
  }
  expect({ problems, foreign }).toEqual({ problems: [], foreign: [] });
}, 90_000);
