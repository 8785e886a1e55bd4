/**
 * `npm run models -- list | pull | rm` (issue 17) as a real child process against a loopback
 * hub (`HF_ENDPOINT`) serving the small test model under a hub path: a pull downloads, verifies
 * and installs; a wrong SHA-256 installs nothing; a connection cut mid-file is resumed by the next
 * pull (a `Range` request from where it stopped); a private repository needs `HF_TOKEN`; `list`
 * shows every state; a server running meanwhile never loads the part, and serves the model once
 * the pull has installed it.
 */
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, statSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { packageRoot } from "../src/config/config.js";
import { acquirePullLock } from "../src/inference/artifacts/pull-lock.js";
import { formatBytes } from "../src/scripts/pull-progress.js";
import { type FakeHub, startFakeHub } from "./support/fake-hub.js";
import { MODELS_DIR, createTestCaller, eventually, expectEnvelope, http, startTestServer } from "./support/harness.js";
import { writeEditedCatalog } from "./support/test-catalog.js";

const LOADER = path.join(packageRoot, "test/support/swc-loader.mjs");
const CLI = path.join(packageRoot, "src/scripts/models-cli.ts");
const GGUF = path.join(MODELS_DIR, "stories260K.gguf");
const BYTES = readFileSync(GGUF);
const SHA256 = createHash("sha256").update(BYTES).digest("hex");
const HUB_PATH = "/test-org/tiny-GGUF/resolve/main/hub-tiny.gguf";
const PRIVATE_PATH = "/test-org/private-GGUF/resolve/main/hub-private.gguf";

let hub: FakeHub;

/** A catalog: the shipped one plus hub models served by the fake hub (one with a wrong checksum). */
const catalogPath = writeEditedCatalog((c) => {
  const base = c.models.find((m) => m.id === "tinystories-260k")!;
  const hubModel = (id: string, file: string, source: string, sha256: string) => ({
    ...base,
    id,
    display_name: id,
    engine: { ...(base.engine as object), file, source, size_bytes: BYTES.length, sha256 },
  });
  c.models.push(
    hubModel("hub-tiny", "hub-tiny.gguf", "hf:test-org/tiny-GGUF/hub-tiny.gguf", SHA256),
    hubModel("hub-corrupt", "hub-corrupt.gguf", "hf:test-org/tiny-GGUF/hub-tiny.gguf", "0".repeat(64)),
    hubModel("hub-private", "hub-private.gguf", "hf:test-org/private-GGUF/hub-private.gguf", SHA256),
  );
});

beforeAll(async () => {
  hub = await startFakeHub();
  hub.serve(HUB_PATH, BYTES);
  hub.serve(PRIVATE_PATH, BYTES, { token: "hf_test_token" });
});
afterAll(() => hub.close());

interface Folders {
  modelsDir: string;
  dataDir: string;
}

function folders(): Folders {
  return {
    modelsDir: mkdtempSync(path.join(os.tmpdir(), "switchyard-pull-models-")),
    dataDir: mkdtempSync(path.join(os.tmpdir(), "switchyard-pull-data-")),
  };
}

interface CliRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Starts `npm run models -- …` (the TypeScript source, as `npm start` tests run `src/main.ts`). */
function startCli(args: string[], dirs: Folders, env: Record<string, string> = {}) {
  const child = spawn(process.execPath, ["--import", LOADER, CLI, ...args], {
    cwd: dirs.dataDir,
    env: {
      PATH: process.env.PATH,
      HOME: dirs.dataDir,
      SWITCHYARD_CATALOG: catalogPath,
      SWITCHYARD_MODELS_DIR: dirs.modelsDir,
      SWITCHYARD_DATA_DIR: dirs.dataDir,
      SWITCHYARD_JWT_SECRET: "models-cli-test-secret-models-cli-test-secret",
      HF_ENDPOINT: hub.url,
      ...env,
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (c: Buffer) => (stdout += c.toString("utf8")));
  child.stderr.on("data", (c: Buffer) => (stderr += c.toString("utf8")));
  // `close`, not `exit`: a child's exit can come before its output has all been read.
  const done = new Promise<CliRun>((resolve) => child.once("close", (code) => resolve({ code, stdout, stderr })));
  return { child, done, output: () => stdout };
}

const runCli = (args: string[], dirs: Folders, env?: Record<string, string>) => startCli(args, dirs, env).done;

const sha256Of = (file: string) => createHash("sha256").update(readFileSync(file)).digest("hex");
const partOf = (dirs: Folders, file: string) => path.join(dirs.modelsDir, ".partial", `${file}.part`);
const hubGets = (p: string) => hub.requests.filter((r) => r.path === p);

describe("npm run models -- pull", () => {
  test("when a model is pulled, then it is downloaded from HF_ENDPOINT, verified, installed, with progress every 10 %", async () => {
    const dirs = folders();
    const before = hubGets(HUB_PATH).length;
    const run = await runCli(["pull", "hub-tiny"], dirs);
    expect(run.stderr).toBe("");
    expect(run.code).toBe(0);
    const installed = path.join(dirs.modelsDir, "hub-tiny.gguf");
    expect(sha256Of(installed)).toBe(SHA256);
    expect(run.stdout).toContain(`hub-tiny: installed ${installed}`);
    expect(run.stdout).toContain(`SHA-256 ${SHA256} verified`);
    // Not a terminal: one line per 10 % at most, ending at 100 %.
    const progress = run.stdout.split("\n").filter((l) => /^hub-tiny: +\d+ %/.test(l));
    expect(progress.length).toBeGreaterThanOrEqual(2);
    expect(progress.length).toBeLessThanOrEqual(11);
    expect(progress.at(-1)).toMatch(/^hub-tiny: 100 % .* MB\/s {2}ETA /);
    // No part is left behind; the hub saw one whole-file GET.
    expect(existsSync(partOf(dirs, "hub-tiny.gguf"))).toBe(false);
    expect(hubGets(HUB_PATH).slice(before)).toEqual([
      expect.objectContaining({ range: undefined, status: 200, authorization: undefined }),
    ]);

    // A second pull has nothing to do.
    const again = await runCli(["pull", "hub-tiny"], dirs);
    expect(again.code).toBe(0);
    expect(again.stdout).toContain(`hub-tiny: already present at ${installed}`);
    expect(hubGets(HUB_PATH).length).toBe(before + 1);
  });

  test("when the downloaded bytes do not match the catalog's SHA-256, then the pull fails and nothing is installed", async () => {
    const dirs = folders();
    const run = await runCli(["pull", "hub-corrupt"], dirs);
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(
      /hub-corrupt: SHA-256 mismatch for hub-corrupt\.gguf: got [0-9a-f]{64}, the catalog says 0{64}/,
    );
    expect(run.stderr).not.toMatch(/\n\s+at /); // one line, no stack trace
    expect(existsSync(path.join(dirs.modelsDir, "hub-corrupt.gguf"))).toBe(false);
    expect(existsSync(partOf(dirs, "hub-corrupt.gguf"))).toBe(false);
    const list = await runCli(["list"], dirs);
    expect(list.stdout).toMatch(/hub-corrupt +text_generation +1\.2 MB +not downloaded/);
  });

  test("when the connection is cut mid-file, then the pull fails, and the next pull resumes from where it stopped", async () => {
    const dirs = folders();
    const cutAt = 400_000;
    hub.cutNextAfter(cutAt);
    const first = await runCli(["pull", "hub-tiny"], dirs);
    expect(first.code).toBe(1);
    expect(first.stderr).toMatch(/hub-tiny: downloading .* failed .*; run the pull again to resume/);
    expect(existsSync(path.join(dirs.modelsDir, "hub-tiny.gguf"))).toBe(false);
    // What arrived before the cut is kept. On a loaded machine the HTTP client may drop the last
    // chunks it had received but not yet handed over when the socket died, so the part can be
    // shorter than what the hub sent, never longer; the resume starts from what is on disk.
    const kept = statSync(partOf(dirs, "hub-tiny.gguf")).size;
    expect(kept).toBeGreaterThan(0);
    expect(kept).toBeLessThanOrEqual(cutAt);
    const list = await runCli(["list"], dirs);
    const percent = Math.floor((kept / BYTES.length) * 100);
    expect(list.stdout).toMatch(new RegExp(`hub-tiny +text_generation +1\\.2 MB +partial ${percent} %`));

    const before = hubGets(HUB_PATH).length;
    const second = await runCli(["pull", "hub-tiny"], dirs);
    expect(second.stderr).toBe("");
    expect(second.code).toBe(0);
    expect(second.stdout).toContain(`(resumed at ${formatBytes(kept)})`);
    // The hub was asked only for the rest, and the result is the whole, verified file.
    expect(hubGets(HUB_PATH).slice(before)).toEqual([
      expect.objectContaining({ range: `bytes=${kept}-`, status: 206 }),
    ]);
    expect(sha256Of(path.join(dirs.modelsDir, "hub-tiny.gguf"))).toBe(SHA256);
  });

  test("when the pull is interrupted (Ctrl-C), then it exits 130 keeping what arrived, and the next pull resumes it", async () => {
    const dirs = folders();
    const held = hub.holdNextAfter(500_000);
    try {
      const pull = startCli(["pull", "hub-tiny"], dirs);
      await held.sent;
      const part = partOf(dirs, "hub-tiny.gguf");
      expect(await eventually(async () => existsSync(part) && statSync(part).size === 500_000)).toBe(true);
      pull.child.kill("SIGINT");
      const first = await pull.done;
      expect(first.code).toBe(130);
      expect(first.stderr).toBe("switchyard models: hub-tiny: interrupted; run the pull again to resume\n");
      expect(existsSync(path.join(dirs.modelsDir, "hub-tiny.gguf"))).toBe(false);
      expect(statSync(part).size).toBe(500_000);
      // The lock went with the pull: the next one neither waits nor takes anything over.
      expect(existsSync(`${part}.lock`)).toBe(false);
    } finally {
      held.release();
    }

    const before = hubGets(HUB_PATH).length;
    const second = await runCli(["pull", "hub-tiny"], dirs);
    expect(second.stderr).toBe("");
    expect(second.code).toBe(0);
    expect(second.stdout).toContain("(resumed at 500.0 kB)");
    expect(hubGets(HUB_PATH).slice(before)).toEqual([expect.objectContaining({ range: "bytes=500000-", status: 206 })]);
    expect(sha256Of(path.join(dirs.modelsDir, "hub-tiny.gguf"))).toBe(SHA256);
  });

  test("when the repository is private, then the pull needs HF_TOKEN, which is sent as a bearer token", async () => {
    const dirs = folders();
    const refused = await runCli(["pull", "hub-private"], dirs);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/answered HTTP 401 \(a private or gated repository needs HF_TOKEN\)/);
    const run = await runCli(["pull", "hub-private"], dirs, { HF_TOKEN: "hf_test_token" });
    expect(run.stderr).toBe("");
    expect(run.code).toBe(0);
    expect(hubGets(PRIVATE_PATH).at(-1)).toEqual(
      expect.objectContaining({ authorization: "Bearer hf_test_token", status: 200 }),
    );
    expect(sha256Of(path.join(dirs.modelsDir, "hub-private.gguf"))).toBe(SHA256);
  });

  test("when an unknown model or no command is given, then a usage line and exit status 2", async () => {
    const dirs = folders();
    const unknown = await runCli(["pull", "no-such-model"], dirs);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain("unknown model no-such-model");
    const none = await runCli([], dirs);
    expect(none.code).toBe(2);
    expect(none.stderr).toContain("usage: npm run models -- list | pull <id…> | rm <id…>");
  });
});

describe("npm run models -- list and rm", () => {
  test("when listed, then every catalog model shows its size, whether it is here, and where; rm deletes it", async () => {
    const dirs = folders();
    const before = await runCli(["list"], dirs);
    expect(before.code).toBe(0);
    const lines = before.stdout.split("\n");
    expect(lines[0]).toMatch(/^ID +MODALITY +SIZE +STATUS +LICENCE +WHERE$/);
    const row = (id: string) => lines.find((l) => l.startsWith(id + " "));
    expect(row("qwen2.5-0.5b-instruct")).toMatch(
      new RegExp(
        `text_generation +675\\.7 MB +not downloaded +apache-2\\.0 +→ ${dirs.modelsDir}/qwen2\\.5-0\\.5b-instruct-q8_0\\.gguf`,
      ),
    );
    expect(row("nomic-embed-text-v1.5")).toMatch(/text_embedding +146\.1 MB +not downloaded +apache-2\.0/);
    expect(row("hub-tiny")).toMatch(/not downloaded/);
    expect(before.stdout).toContain(`Pulls install into ${dirs.modelsDir}.`);

    expect((await runCli(["pull", "hub-tiny"], dirs)).code).toBe(0);
    const after = await runCli(["list"], dirs);
    const installed = path.join(dirs.modelsDir, "hub-tiny.gguf");
    expect(after.stdout.split("\n").find((l) => l.startsWith("hub-tiny "))).toMatch(
      new RegExp(`1\\.2 MB +present +MIT +${installed}$`),
    );

    const rm = await runCli(["rm", "hub-tiny"], dirs);
    expect(rm.code).toBe(0);
    expect(rm.stdout).toContain(`hub-tiny: removed ${installed}`);
    expect(existsSync(installed)).toBe(false);
    expect(readdirSync(dirs.modelsDir)).toEqual([]);
  });
});

describe("npm run models with damaged files and pull locks (review of issue 17)", () => {
  test("when a file is truncated, then list says damaged; rm under a running pull refuses naming the lock, and clears a dead one", async () => {
    const dirs = folders();
    const installed = path.join(dirs.modelsDir, "hub-tiny.gguf");
    writeFileSync(installed, BYTES.subarray(0, 1000));
    const list = await runCli(["list"], dirs);
    expect(list.stdout.split("\n").find((l) => l.startsWith("hub-tiny "))).toMatch(
      /1\.2 MB +damaged \(1\.0 kB\): pull again/,
    );

    const lock = `${partOf(dirs, "hub-tiny.gguf")}.lock`;
    mkdirSync(path.dirname(lock), { recursive: true });
    const held = await acquirePullLock(lock); // a pull under way in this (live) process
    try {
      const refused = await runCli(["rm", "hub-tiny"], dirs);
      expect(refused.code).toBe(1);
      expect(refused.stderr).toContain(`another pull of hub-tiny.gguf is running (pid ${process.pid}`);
      expect(refused.stderr).toContain(`lock ${lock}`);
      expect(existsSync(installed)).toBe(true);
    } finally {
      await held.release();
    }
    // A lock whose process is gone (a killed pull).
    writeFileSync(lock, JSON.stringify({ pid: 2 ** 22 + 7, host: os.hostname(), started: 1, token: "dead" }));
    const rm = await runCli(["rm", "hub-tiny"], dirs);
    expect(rm.code).toBe(0);
    expect(rm.stdout).toContain(lock);
    expect(existsSync(lock)).toBe(false);
    expect(existsSync(installed)).toBe(false);
  });
});

describe("a server running while a model is pulled", () => {
  test("when a pull is half way, then the server lists the model as not downloaded and answers 404; once installed, it serves it", async () => {
    const dirs = folders();
    const held = hub.holdNextAfter(500_000);
    const pull = startCli(["pull", "hub-tiny"], dirs);
    await held.sent;
    const part = partOf(dirs, "hub-tiny.gguf");
    expect(await eventually(async () => existsSync(part) && statSync(part).size === 500_000)).toBe(true);

    // The server's models folder holds the part; the default model comes from the shared folder.
    const server = await startTestServer({ catalogPath, modelsDir: dirs.modelsDir, dataDir: dirs.dataDir });
    try {
      const caller = await createTestCaller(server.url);
      const listed = await http(server.url, "GET", "/v1/models", { token: caller.key });
      expect(listed.body.data.find((m: any) => m.id === "hub-tiny")).toMatchObject({
        deploy_status: "pending_deploy",
        status_reason: "not downloaded: run npm run models -- pull hub-tiny",
      });
      const refused = await http(server.url, "POST", "/v1/chat/completions", {
        token: caller.key,
        body: { model: "hub-tiny", messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 4 },
      });
      expectEnvelope(refused, 404);
      expect(refused.body.detail).toBe("Model 'hub-tiny' is not downloaded: run npm run models -- pull hub-tiny");

      held.release();
      const done = await pull.done;
      expect(done.code).toBe(0);
      const served = await http(server.url, "POST", "/v1/chat/completions", {
        token: caller.key,
        body: { model: "hub-tiny", messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 4 },
      });
      expect(served.status).toBe(200);
      expect(served.body.usage.completion_tokens).toBeGreaterThan(0);
      const relisted = await http(server.url, "GET", "/v1/models", { token: caller.key });
      expect(relisted.body.data.find((m: any) => m.id === "hub-tiny")).toMatchObject({
        deploy_status: "available",
        status_reason: null,
      });
    } finally {
      held.release();
      await server.close();
    }
  }, 60_000);
});
