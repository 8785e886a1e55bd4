/**
 * Logs for people (issue 13, item 5), with the real entry point (`src/main.ts`, what `npm start`
 * runs) as a child process: in a terminal (a pseudo-terminal made by util-linux `script`) it prints
 * readable lines, one per request with the request id; with stdout a pipe it prints JSON lines,
 * the access line carrying the same id. A failed request's error line carries its id too (REST and
 * GraphQL over HTTP).
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import { packageRoot } from "../src/config/config.js";
import { usesPrettyLogs } from "../src/server.js";
import { killChildren, launchChild } from "./support/child-server.js";
import {
  MODELS_DIR,
  createTestCaller,
  createTestDatabase,
  eventually,
  http,
  startTestServer,
} from "./support/harness.js";
import { captureLogs } from "./support/log-capture.js";

const LOADER = path.join(packageRoot, "test/support/swc-loader.mjs");

let database: Awaited<ReturnType<typeof createTestDatabase>>;
beforeAll(async () => {
  database = await createTestDatabase();
});
afterAll(async () => {
  killChildren();
  await database?.close();
});

/** Terminal colours and cursor codes, removed to read the text. */
const ansi = (text: string) =>
  text.replace(new RegExp(`${String.fromCharCode(27)}\\[[0-9;?]*[A-Za-z]`, "g"), "").replace(/\r/g, "");

test("the format rule: pretty in a terminal or when asked, JSON otherwise", () => {
  expect(usesPrettyLogs("auto", true)).toBe(true);
  expect(usesPrettyLogs("auto", false)).toBe(false);
  expect(usesPrettyLogs("json", true)).toBe(false);
  expect(usesPrettyLogs("pretty", false)).toBe(true);
});

test("in a terminal, npm start's entry prints readable lines, one per request with its request id", async () => {
  const command = [process.execPath, "--import", LOADER, path.join(packageRoot, "src/main.ts")]
    .map((a) => `'${a}'`)
    .join(" ");
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    PORT: "0",
    HOST: "127.0.0.1",
    LOG_LEVEL: "info",
    DATABASE_URL: database.url,
    SWITCHYARD_DATA_DIR: mkdtempSync(path.join(os.tmpdir(), "switchyard-tty-")),
    SWITCHYARD_MODELS_DIR: MODELS_DIR,
    SWITCHYARD_ALLOW_MODEL_DOWNLOAD: "false",
    SWITCHYARD_GPU: "off",
    SWITCHYARD_JWT_SECRET: "log-format-test-secret-log-format-test-secret",
    NO_COLOR: "1",
  };
  delete env.SWITCHYARD_LOG_FORMAT;
  delete env.SWITCHYARD_CONFIG;
  // `script` runs the command on a pseudo-terminal: its stdout is a TTY, as in a person's shell.
  const child: ChildProcess = spawn("script", ["-qfec", command, "/dev/null"], {
    cwd: env.SWITCHYARD_DATA_DIR,
    env,
    stdio: ["pipe", "pipe", "pipe"],
  });
  let output = "";
  child.stdout!.on("data", (chunk: Buffer) => (output += ansi(chunk.toString("utf8"))));
  const exited = new Promise((resolve) => child.once("exit", resolve));
  try {
    expect(await eventually(async () => /Switchyard listening/.test(output), 45_000)).toBe(true);
    const listening = output.split("\n").find((l) => l.includes("Switchyard listening"))!;
    // Readable, not a JSON record: a time of day, the level, the message.
    expect(listening.trim().startsWith("{")).toBe(false);
    expect(listening).toMatch(/^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: Switchyard listening/);
    const url = /http:\/\/127\.0\.0\.1:\d+/.exec(listening)![0];

    const res = await fetch(`${url}/v1/models`);
    expect(res.status).toBe(401);
    const requestId = res.headers.get("x-request-id")!;
    expect(requestId).toMatch(/^[0-9a-f-]{36}$/);
    expect(await eventually(async () => output.includes(requestId), 10_000)).toBe(true);
    const line = output.split("\n").find((l) => l.includes(requestId))!;
    expect(line).toMatch(/INFO: request/);
    expect(line).toContain("/v1/models");
    expect(line).toContain("401");
  } finally {
    // Ctrl-C on the terminal: the server shuts down as a person stops it.
    child.stdin!.write("\x03");
    const stopped = await Promise.race([
      exited.then(() => true),
      new Promise((r) => setTimeout(() => r(false), 20_000)),
    ]);
    if (!stopped) child.kill("SIGKILL");
  }
}, 90_000);

test("with stdout a pipe, every line is JSON and the access line carries the request id", async () => {
  const server = await launchChild({
    databaseUrl: database.url,
    dataDir: mkdtempSync(path.join(os.tmpdir(), "switchyard-pipe-")),
    env: { LOG_LEVEL: "debug", SWITCHYARD_LOG_FORMAT: undefined },
  });
  const lines: string[] = [];
  createInterface({ input: server.child.stdout! }).on("line", (l) => lines.push(l));
  const res = await fetch(`${server.url}/v1/models`);
  const requestId = res.headers.get("x-request-id")!;
  expect(await eventually(async () => lines.some((l) => l.includes(requestId)), 10_000)).toBe(true);
  for (const l of lines) expect(() => JSON.parse(l)).not.toThrow();
  const access = lines.map((l) => JSON.parse(l) as Record<string, unknown>).find((r) => r.requestId === requestId);
  expect(access).toMatchObject({ msg: "request", method: "GET", path: "/v1/models", status: 401 });
  server.child.kill("SIGINT");
  await server.exited;
}, 90_000);

test("a request that fails (500) is logged with its request id, over REST and over GraphQL", async () => {
  const logs = captureLogs("error");
  const server = await startTestServer({}, undefined, { logger: logs.logger });
  try {
    const caller = await createTestCaller(server.url);
    // A table gone under the service: reading streams fails inside, as a broken database would.
    await server.db("ALTER TABLE streams RENAME TO streams_gone");
    const rest = await http(server.url, "GET", "/v1/streams", { token: caller.key });
    expect(rest.status).toBe(500);
    const gql = await http(server.url, "POST", "/graphql", {
      token: caller.token,
      body: { query: "{ streams { id } }" },
    });
    expect(gql.body.errors[0].extensions.code).toBe("INTERNAL");
    const records = logs.records();
    expect(
      records.find((r) => r.msg === "request failed" && r.requestId === rest.headers.get("x-request-id")),
    ).toMatchObject({
      path: "/v1/streams",
    });
    expect(
      records.find((r) => r.msg === "GraphQL operation failed" && r.requestId === gql.headers.get("x-request-id")),
    ).toBeDefined();
  } finally {
    await server.close();
  }
}, 60_000);
