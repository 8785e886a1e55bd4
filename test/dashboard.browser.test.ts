/**
 * The dashboard (issue 13, item 3) in a real browser: Debian's headless Chromium driven by
 * playwright-core against a real test server. A person signs up with the keyboard, creates a key
 * (shown once), the test runs a chat completion with it through the official OpenAI client, and the
 * page shows it live (graphql-ws subscription), in the activity table and its detail view, and as a
 * lower balance; a batch shows its progress, an invitation its pending row; the key is revoked and
 * the API refuses it. A failed completion webhook is listed with each attempt on the Webhooks page,
 * and its Redeliver button gets it delivered (issue 27, item 6). Every page is screenshotted (1280 px, and the phone width) into a folder the
 * test prints. The page may load nothing but its own files and talk to nothing but `/graphql`.
 *
 * Chromium: `SWITCHYARD_CHROMIUM`, else `/usr/bin/chromium` (`.ci/run` installs it when missing);
 * without it the test fails and says how to install it. The dashboard is built (Vite) when
 * `dist/dashboard` is missing or older than its sources, so `npm test` needs no `npm run build`.
 */
import { existsSync, mkdtempSync, readdirSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { type Browser, type Page, chromium } from "playwright-core";
import { DASHBOARD_DIR } from "../src/rest/dashboard.js";
import {
  CHAT_MODEL,
  type TestServer,
  createTestCaller,
  eventually,
  http,
  openaiClient,
  startTestServer,
} from "./support/harness.js";
import { writeTestCatalog } from "./support/test-catalog.js";
import { ensureViteBuilt } from "./support/vite-build.js";
import { startWebhookReceiver } from "./support/webhook-receiver.js";

const CHROMIUM = process.env.SWITCHYARD_CHROMIUM ?? "/usr/bin/chromium";
const DESKTOP = { width: 1280, height: 900 };
const PHONE = { width: 390, height: 844 };

let server: TestServer;
let browser: Browser;
let page: Page;
let shots: string;
let shotCount = 0;
const pageErrors: string[] = [];
const foreignRequests: string[] = [];

beforeAll(async () => {
  if (!existsSync(CHROMIUM)) {
    throw new Error(
      `Chromium not found at ${CHROMIUM}: install Debian's chromium (sudo apt-get install -y chromium; ` +
        `.ci/run does it) or point SWITCHYARD_CHROMIUM at a Chromium binary`,
    );
  }
  await ensureViteBuilt("dashboard", DASHBOARD_DIR);
  server = await startTestServer({
    // Prices that make one short completion cost a visible amount (the shipped ones round to 0–1 micro-USD).
    catalogPath: writeTestCatalog(CHAT_MODEL, { input: "1000", cachedInput: "500", output: "2000" }),
    batchConcurrency: 1,
    // The Webhooks page's test sends to a receiver on loopback, with one quick retry.
    webhookAllowPrivate: true,
    webhookRetryDelaysMs: "20",
  });
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    // Containers: /dev/shm is small, and as root Chromium starts only without its sandbox.
    args: ["--disable-dev-shm-usage", ...(process.getuid?.() === 0 ? ["--no-sandbox"] : [])],
  });
  page = await browser.newPage({ viewport: DESKTOP });
  page.setDefaultTimeout(10_000);
  page.on("pageerror", (err) => pageErrors.push(`pageerror: ${err.message}`));
  page.on("console", (msg) => {
    // A refused request the page handles (e.g. a failed sign-in) logs the 4xx; CSP violations and script errors do not pass.
    if (msg.type() === "error" && !/status of 4\d\d/.test(msg.text())) pageErrors.push(`console: ${msg.text()}`);
  });
  page.on("request", (req) => {
    const url = new URL(req.url());
    const own = url.host === new URL(server.url).host;
    if (!own || !(url.pathname === "/graphql" || url.pathname.startsWith("/dashboard")))
      foreignRequests.push(req.url());
  });
  shots = mkdtempSync(path.join(os.tmpdir(), "switchyard-dashboard-shots-"));
  console.log(`dashboard screenshots: ${shots}`);
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await server?.close();
  if (shots) console.log(`dashboard screenshots (${shotCount}): ${shots}\n  ${readdirSync(shots).sort().join("\n  ")}`);
});

async function shot(name: string): Promise<void> {
  await page.screenshot({
    path: path.join(shots, `${String(++shotCount).padStart(2, "0")}-${name}.png`),
    fullPage: true,
  });
}

/** Form controls of the page without a label (`<label for>` or `aria-label`), as HTML. */
async function unlabelled(): Promise<string[]> {
  return (await page.evaluate(
    `[...document.querySelectorAll("input, select, textarea, button")]
       .filter((e) => !(e.labels && e.labels.length) && !e.getAttribute("aria-label") && !(e.tagName === "BUTTON" && e.textContent.trim()))
       .map((e) => e.outerHTML)`,
  )) as string[];
}

/**
 * Clicks the navigation link `name`, waits for the page's heading, which has the focus (keyboard
 * and screen-reader users land on the new content), and checks every control has a label.
 */
async function open(name: string, heading: string | RegExp = name): Promise<void> {
  await page.getByRole("navigation", { name: "Dashboard" }).getByRole("link", { name, exact: true }).click();
  await page.getByRole("heading", { level: 1, name: heading }).waitFor();
  await page.waitForFunction("document.activeElement && document.activeElement.tagName === 'H1'");
  expect(await unlabelled()).toEqual([]);
}

/** Clicks the page's Refresh button until `selector` is there (group commits land a moment later). */
async function refreshUntil(selector: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while ((await page.locator(selector).count()) === 0) {
    if (Date.now() > deadline) throw new Error(`${selector} did not appear within ${timeoutMs} ms`);
    await page.getByRole("button", { name: "Refresh" }).click();
    await page.waitForTimeout(250);
  }
}

/** `$4.999990` → 4999990 micro-USD. */
function micros(text: string | null): number {
  const m = /^\$([\d,]+)\.(\d{6})$/.exec((text ?? "").trim());
  if (!m) throw new Error(`not a balance: ${text}`);
  return Number(m[1].replace(/,/g, "")) * 1e6 + Number(m[2]);
}

/** 83 micro-USD → `$0.000083`, as the dashboard writes amounts. */
function usdText(microsValue: number): string {
  return `$${Math.floor(microsValue / 1e6).toLocaleString("en-US")}.${String(microsValue % 1e6).padStart(6, "0")}`;
}

/** The pages of the navigation: link name and heading. */
const NAV_PAGES: Array<[string, string | RegExp]> = [
  ["Usage", "Usage"],
  ["API keys", "API keys"],
  ["Credit", "Credit"],
  ["Activity", "Activity"],
  ["Live events", "Live events"],
  ["Batches", "Batches"],
  ["Webhooks", "Webhooks"],
  ["Team", /^Team /],
];

/** True when nothing on the page is wider than the viewport (no sideways scrolling of the page). */
async function fitsWidth(): Promise<boolean> {
  // Evaluated in the page (strings: this file is type-checked without the DOM library).
  return (await page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")) as boolean;
}

test("when a person signs up, creates a key and it is used, then the dashboard shows the request live, in the activity and on the balance, and the key can be revoked", async () => {
  const email = `dash-${Date.now()}@example.com`;
  const password = "correct horse battery";

  // Sign up with the keyboard only: the heading has the focus, then Tab through labelled fields.
  await page.goto(`${server.url}/dashboard/`);
  await page.getByRole("heading", { level: 1, name: "Sign in" }).waitFor();
  await shot("signin");
  await page.getByRole("link", { name: "Create an account" }).click();
  await page.getByRole("heading", { level: 1, name: "Sign up" }).waitFor();
  await page.keyboard.press("Tab");
  expect(await page.evaluate('document.activeElement?.getAttribute("name")')).toBe("name");
  await page.keyboard.type("Dana Dashboard");
  await page.keyboard.press("Tab");
  await page.keyboard.type(email);
  await page.keyboard.press("Tab");
  await page.keyboard.type(password);
  // The focused field is outlined (focus visible).
  expect(await page.evaluate("getComputedStyle(document.activeElement).outlineStyle")).not.toBe("none");
  await shot("signup");
  await page.keyboard.press("Enter");
  await page.getByRole("heading", { level: 1, name: "Usage" }).waitFor();
  await page.getByText(`${email} · owner`).waitFor();
  await shot("usage-empty");

  // The signup credit, before any request.
  await open("Credit");
  const before = micros(await page.getByTestId("balance").textContent());
  expect(before).toBeGreaterThan(0);
  await page.getByRole("cell", { name: "grant" }).first().waitFor();

  // A key: shown once, listed by its prefix.
  await open("API keys");
  await page.getByLabel("Name", { exact: true }).fill("browser test");
  await page.getByRole("button", { name: "Create key" }).click();
  const secret = page.getByLabel("Your new API key");
  await secret.waitFor();
  const key = await secret.inputValue();
  expect(key.length).toBeGreaterThan(20);
  const keyRow = page.locator("tr", { hasText: "browser test" });
  await keyRow.getByText("active").waitFor();
  expect(await keyRow.locator("code").textContent()).toBe(`${key.slice(0, 12)}…`);
  const keyId = await keyRow.getAttribute("data-key-id");
  await shot("keys-created");

  // Live events: subscribed before the request is made, the event arrives without a reload.
  await open("Live events");
  await page.getByText("Live: connected").waitFor();
  expect(await eventually(async () => server.app.events.subscribers > 0, 5_000)).toBe(true);
  const openai = openaiClient(server.url, key);
  const completion = await openai.chat.completions.create({
    model: CHAT_MODEL,
    messages: [{ role: "user", content: "Once upon a time there was a little dog" }],
    max_tokens: 16,
  });
  const activityId = completion.id.replace(/^chatcmpl-/, "");
  const liveRow = page.locator(`tr[data-response-id="${activityId}"]`);
  await liveRow.waitFor();
  expect(await liveRow.getByText("live").count()).toBe(1);
  expect(await liveRow.textContent()).toContain(CHAT_MODEL);
  await shot("events-live");

  // The activity table, filtered by model, and the detail view with the request and the answer.
  await open("Activity");
  await refreshUntil(`tr[data-activity-id="${activityId}"]`);
  await page.getByLabel("Model").selectOption(CHAT_MODEL);
  await page.getByLabel("Status").selectOption("completed");
  await page.getByRole("button", { name: "Apply" }).click();
  await page.waitForURL(/status=completed/);
  expect(new URL(page.url()).searchParams.get("model")).toBe(CHAT_MODEL);
  await page.locator(`tr[data-activity-id="${activityId}"]`).waitFor();
  await shot("activity");
  await page.getByRole("link", { name: `Details of ${activityId}` }).click();
  await page.getByRole("heading", { level: 1, name: "Activity record" }).waitFor();
  await page.locator("dl.facts code", { hasText: activityId }).waitFor();
  expect(await page.locator("pre.json").first().textContent()).toContain("Once upon a time there was a little dog");
  await shot("activity-detail");

  // The balance dropped by the request's cost.
  await open("Credit");
  let after = before;
  const deadline = Date.now() + 10_000;
  while (after === before && Date.now() < deadline) {
    await page.getByRole("button", { name: "Refresh" }).click();
    await page.waitForTimeout(250);
    after = micros(await page.getByTestId("balance").textContent());
  }
  const [charged] = await server.db<{ cost_micros: string }>("SELECT cost_micros FROM activity WHERE id = $1", [
    activityId,
  ]);
  expect(Number(charged.cost_micros)).toBeGreaterThan(0);
  expect(after).toBe(before - Number(charged.cost_micros));
  await page.getByRole("cell", { name: "usage" }).first().waitFor();
  await shot("credit");

  // The usage chart (uPlot draws a canvas) by day and model.
  await open("Usage");
  await page.locator(".chart canvas").first().waitFor();
  await page.getByRole("cell", { name: CHAT_MODEL }).first().waitFor();
  await shot("usage");

  // A batch of two items, with its progress.
  const batch = await http(server.url, "POST", "/v1/batches", {
    token: key,
    body: {
      requests: [1, 2].map((i) => ({
        custom_id: `b${i}`,
        body: { model: CHAT_MODEL, messages: [{ role: "user", content: "Once" }], max_tokens: 4 },
      })),
    },
  });
  expect(batch.status).toBe(201);
  await open("Batches");
  const batchRow = page.locator("tr", { hasText: batch.body.id });
  await batchRow.waitFor();
  await batchRow.getByText(/2 of 2 finished/).waitFor({ timeout: 20_000 });
  await shot("batches");

  // The team: an invitation appears as pending; the invited person signs up with its link in
  // another browser context, joins as a member, and sees that credit is for owners and admins.
  await open("Team", /^Team /);
  const invitee = `invitee-${Date.now()}@example.com`;
  await page.getByLabel("Email").fill(invitee);
  await page.getByRole("button", { name: "Invite", exact: true }).click();
  const inviteLink = await page.locator("code.wrap").textContent();
  expect(inviteLink).toContain("/dashboard/signup?invite=");
  await page.getByRole("region", { name: "Pending invitations" }).getByText(invitee).waitFor();
  await shot("team-invited");
  const other = await browser.newContext({ viewport: DESKTOP });
  try {
    const guest = await other.newPage();
    await guest.goto(inviteLink!);
    await guest.getByLabel("Email").fill(invitee);
    await guest.getByLabel("Password").fill(password);
    expect(await guest.getByLabel("Invitation token (optional)").inputValue()).not.toBe("");
    await guest.getByRole("button", { name: "Sign up" }).click();
    await guest.getByText(`${invitee} · member`).waitFor();
    await guest.getByRole("link", { name: "Credit", exact: true }).click();
    await guest.getByText("Only owners and admins of the team see its credit and ledger.").waitFor();
    await guest.screenshot({ path: path.join(shots, `${String(++shotCount).padStart(2, "0")}-member-credit.png`) });
  } finally {
    await other.close();
  }
  await page.reload();
  await page.getByRole("heading", { level: 1, name: /^Team / }).waitFor();
  await page.getByRole("region", { name: "Members" }).getByText(invitee).waitFor();
  expect(await page.getByRole("region", { name: "Pending invitations" }).getByText(invitee).count()).toBe(0);
  await shot("team");

  // Every page fits the width at 1280 px and on a phone, with its data loaded (tables scroll
  // inside their own region); the signed-out pages are checked after signing out below.
  for (const viewport of [DESKTOP, PHONE]) {
    await page.setViewportSize(viewport);
    const at = viewport === PHONE ? "phone" : "desktop";
    for (const [name, heading] of NAV_PAGES) {
      await open(name, heading);
      await page.waitForLoadState("networkidle");
      expect({ at, name, fits: await fitsWidth() }).toEqual({ at, name, fits: true });
      if (viewport === PHONE) await shot(`phone-${name.toLowerCase().replace(/\s+/g, "-")}`);
    }
    await open("Activity");
    await page.getByRole("link", { name: `Details of ${activityId}` }).click();
    await page.getByRole("heading", { level: 1, name: "Activity record" }).waitFor();
    await page.waitForLoadState("networkidle");
    expect({ at, name: "Activity record", fits: await fitsWidth() }).toEqual({
      at,
      name: "Activity record",
      fits: true,
    });
    if (viewport === PHONE) await shot("phone-activity-detail");
  }
  await page.setViewportSize(DESKTOP);

  // Revoke the key: listed as revoked, and the API refuses it. Back on the page, the key itself is
  // nowhere (it was shown once, at creation): only its prefix is listed.
  // The key's limits, set through the API (issue 29), are listed with what it spent this month.
  const limited = await http(server.url, "PATCH", `/control/v1/auth/api-keys/${keyId}`, {
    token: key,
    body: { budget_micros: 1_000_000, budget_period: "month", rpm_limit: 60 },
  });
  expect(limited.status).toBe(200);
  await open("API keys");
  await keyRow.getByText("active").waitFor();
  const spent = usdText(limited.body.spent_micros);
  const left = usdText(limited.body.remaining_micros);
  await keyRow.getByText(`${spent} of $1.000000/month`).waitFor();
  await keyRow.getByText(`${left} left, resets`, { exact: false }).waitFor();
  await keyRow.getByText("60 rpm").waitFor();
  expect(limited.body.spent_micros).toBeGreaterThan(0);
  await shot("keys-limits");
  expect(await page.getByLabel("Your new API key").count()).toBe(0);
  expect(await page.content()).not.toContain(key);
  page.once("dialog", (dialog) => void dialog.accept());
  await page.getByRole("button", { name: /^Revoke key browser test/ }).click();
  await keyRow.getByText("revoked").waitFor();
  await shot("keys-revoked");
  await expect(
    openai.chat.completions.create({ model: CHAT_MODEL, messages: [{ role: "user", content: "x" }], max_tokens: 2 }),
  ).rejects.toMatchObject({ status: 401 });

  // Sign out, and back in with the password.
  await page.getByRole("button", { name: "Sign out" }).click();
  await page.getByRole("heading", { level: 1, name: "Sign in" }).waitFor();
  await page.getByLabel("Email").fill(email);
  await page.getByLabel("Password").fill("wrong password");
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("alert").waitFor();
  await shot("signin-refused");
  // The signed-out pages fit a phone too.
  await page.setViewportSize(PHONE);
  expect({ name: "Sign in", fits: await fitsWidth() }).toEqual({ name: "Sign in", fits: true });
  await shot("phone-signin");
  await page.getByRole("link", { name: "Create an account" }).click();
  await page.getByRole("heading", { level: 1, name: "Sign up" }).waitFor();
  expect({ name: "Sign up", fits: await fitsWidth() }).toEqual({ name: "Sign up", fits: true });
  await shot("phone-signup");
  await page.goBack();
  await page.getByRole("heading", { level: 1, name: "Sign in" }).waitFor();
  await page.setViewportSize(DESKTOP);
  await page.getByLabel("Email").fill(email);
  await page.getByLabel("Password").fill(password);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("heading", { level: 1, name: "Usage" }).waitFor();

  expect(pageErrors).toEqual([]);
  expect(foreignRequests).toEqual([]);
}, 90_000);

test("when a completion webhook failed, then the Webhooks page lists it with each attempt, and Redeliver gets it delivered", async () => {
  const receiver = await startWebhookReceiver();
  const context = await browser.newContext({ viewport: DESKTOP });
  const errors: string[] = [];
  try {
    const owner = await createTestCaller(server.url);
    // The first try and its retry fail; the redelivery gets through.
    receiver.script("/dash", [{ status: 500 }, { status: 500 }, { status: 200 }]);
    const created = await http(server.url, "POST", "/v1/responses", {
      token: owner.key,
      body: {
        model: CHAT_MODEL,
        input: "Once",
        max_output_tokens: 4,
        metadata: { completion_webhook: `${receiver.url}/dash` },
      },
    });
    expect(created.status).toBe(200);
    let deliveryId = "";
    await eventually(async () => {
      const res = await http(server.url, "GET", `/control/v1/webhooks/deliveries?response_id=${created.body.id}`, {
        token: owner.token,
      });
      deliveryId = res.body.items?.[0]?.status === "failed" ? res.body.items[0].id : "";
      return deliveryId !== "";
    }, 15_000);
    expect(deliveryId).not.toBe("");

    const tab = await context.newPage();
    tab.setDefaultTimeout(10_000);
    tab.on("pageerror", (err) => errors.push(`pageerror: ${err.message}`));
    tab.on("console", (msg) => void (msg.type() === "error" && errors.push(`console: ${msg.text()}`)));
    await tab.goto(`${server.url}/dashboard/signin`);
    await tab.getByLabel("Email").fill(owner.email);
    await tab.getByLabel("Password").fill(owner.password);
    await tab.getByRole("button", { name: "Sign in" }).click();
    await tab.getByRole("heading", { level: 1, name: "Usage" }).waitFor();
    await tab
      .getByRole("navigation", { name: "Dashboard" })
      .getByRole("link", { name: "Webhooks", exact: true })
      .click();
    await tab.getByRole("heading", { level: 1, name: "Webhooks" }).waitFor();

    const row = tab.locator(`tr[data-delivery-id="${deliveryId}"]`);
    await row.waitFor();
    expect(await row.locator(".badge").textContent()).toBe("failed");
    expect(await row.textContent()).toContain(`${receiver.url}/dash`);
    const attempts = row.getByRole("list", { name: `Attempts of delivery ${deliveryId}` }).getByRole("listitem");
    expect(await attempts.count()).toBe(2);
    expect(await attempts.allTextContents()).toEqual([
      expect.stringContaining("HTTP 500"),
      expect.stringContaining("HTTP 500"),
    ]);
    await tab.screenshot({ path: path.join(shots, `${String(++shotCount).padStart(2, "0")}-webhooks-failed.png`) });

    await row.getByRole("button", { name: `Redeliver ${deliveryId}` }).click();
    await tab.getByText(`Delivery ${deliveryId} is pending again`).waitFor();
    // The list refreshes itself while a delivery is pending; Refresh makes it sooner.
    const deadline = Date.now() + 15_000;
    while ((await row.locator(".badge").textContent()) !== "delivered") {
      if (Date.now() > deadline) throw new Error("the redelivery was not shown delivered within 15 s");
      await tab.getByRole("button", { name: "Refresh" }).click();
      await tab.waitForTimeout(250);
    }
    expect(await attempts.count()).toBe(3);
    expect(await attempts.nth(2).textContent()).toContain("HTTP 200");
    expect(await row.getByRole("button", { name: /^Redeliver/ }).count()).toBe(0);
    expect(receiver.on("/dash")).toHaveLength(3);
    await tab.screenshot({
      path: path.join(shots, `${String(++shotCount).padStart(2, "0")}-webhooks-redelivered.png`),
    });
    expect(errors).toEqual([]);
  } finally {
    await context.close();
    await receiver.close();
  }
}, 60_000);

test("the dashboard's files come from this origin: the page with a same-origin CSP, hashed assets cached, a missing asset 404", async () => {
  const res = await fetch(`${server.url}/dashboard/activity?status=completed`);
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toMatch(/^text\/html/);
  expect(res.headers.get("cache-control")).toBe("no-store");
  expect(res.headers.get("content-security-policy")).toContain("default-src 'self'");
  const html = await res.text();
  const assets = [...html.matchAll(/(?:src|href)="([^"#][^"]*)"/g)].map((m) => m[1]);
  expect(assets.length).toBeGreaterThan(0);
  for (const asset of assets) {
    expect(asset).toMatch(/^\/dashboard\/assets\//);
    const a = await fetch(server.url + asset);
    expect(a.status).toBe(200);
    expect(a.headers.get("cache-control")).toMatch(/immutable/);
  }
  const missing = await http(server.url, "GET", "/dashboard/assets/nope.js");
  expect(missing.status).toBe(404);
  expect(missing.body).toEqual(expect.objectContaining({ status_code: 404 }));
});
