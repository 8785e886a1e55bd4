/**
 * The fixes of the hostile review of issue 17 (pulling model files), against a loopback hub:
 * stale pull locks are taken over (a container's pid 1 restarted, no heartbeat, a dead process)
 * and by exactly one of several contenders; a second pull waits for the first; downloads are
 * capped at the file's size; credentials go only to HF_ENDPOINT's origin and are never shown;
 * a resume never splices two versions of a file; a damaged file under the final name is not
 * usable and is replaced by a pull; catalog file names cannot leave the models folder; a removed
 * file is seen as removed by a running server.
 */
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, statSync, utimesSync, writeFileSync } from "node:fs";
import { mkdir, rename, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { type Catalog, type CatalogModel, loadCatalog } from "../../src/config/catalog.js";
import { ConfigError, loadConfig, packageRoot } from "../../src/config/config.js";
import { DownloadError } from "../../src/inference/artifacts/download-error.js";
import { downloadModelFile, partialPath } from "../../src/inference/artifacts/hub-download.js";
import { acquirePullLock, inspectPullLock, takeOverStaleLock } from "../../src/inference/artifacts/pull-lock.js";
import { LocalModelFiles, type PullWait, pullModel, removeModel } from "../../src/inference/artifacts/model-store.js";
import { pullAtStart } from "../../src/services/models/start-models.js";
import { type FakeHub, startFakeHub } from "../support/fake-hub.js";
import { MODELS_DIR } from "../support/harness.js";
import { captureLogs } from "../support/log-capture.js";
import { writeEditedCatalog } from "../support/test-catalog.js";

const BYTES = readFileSync(path.join(MODELS_DIR, "stories260K.gguf"));
const SHA256 = createHash("sha256").update(BYTES).digest("hex");
/** Another version of the file: same size, other bytes. */
const BYTES_B = Buffer.from(BYTES.map((b, i) => (i >= 300_000 ? b ^ 0xff : b)));
const HUB_PATH = "/test-org/tiny-GGUF/resolve/main/hub-tiny.gguf";
const SOURCE = "hf:test-org/tiny-GGUF/hub-tiny.gguf";
const LOADER = path.join(packageRoot, "test/support/swc-loader.mjs");
const CONTENDER = path.join(packageRoot, "test/support/lock-contender.ts");

let hub: FakeHub;
beforeAll(async () => {
  hub = await startFakeHub();
  hub.serve(HUB_PATH, BYTES);
});
afterAll(() => hub.close());

const tmp = () => mkdtempSync(path.join(os.tmpdir(), "switchyard-pull-hardening-"));
const sha = (b: Buffer) => createHash("sha256").update(b).digest("hex");
const gets = (p: string) => hub.requests.filter((r) => r.path === p);

/** A catalog model for the hub's file (`engine` fields overridable). */
function hubModel(engine: Record<string, unknown> = {}): CatalogModel {
  const base = loadCatalog(path.join(packageRoot, "src/config/catalog.json")).models[0];
  return {
    ...base,
    id: "hub-tiny",
    engine: {
      ...(base.engine as object),
      file: "hub-tiny.gguf",
      source: SOURCE,
      size_bytes: BYTES.length,
      sha256: SHA256,
      ...engine,
    } as CatalogModel["engine"],
  };
}

/** A download of the hub's file into a new folder. */
function download(dir: string, extra: Partial<Parameters<typeof downloadModelFile>[0]> = {}) {
  return downloadModelFile({
    source: SOURCE,
    destination: path.join(dir, "hub-tiny.gguf"),
    sizeBytes: BYTES.length,
    sha256: SHA256,
    endpoint: hub.url,
    ...extra,
  });
}

/** Writes a lock file for `dir`'s download, as `holder` (JSON or a bare pid), `ageMs` old. */
async function plantLock(dir: string, holder: unknown, ageMs = 0): Promise<string> {
  const lock = partialPath(path.join(dir, "hub-tiny.gguf")) + ".lock";
  await mkdir(path.dirname(lock), { recursive: true });
  writeFileSync(lock, typeof holder === "string" ? holder : JSON.stringify(holder));
  const t = new Date(Date.now() - ageMs);
  utimesSync(lock, t, t);
  return lock;
}

describe("pull locks (finding 1)", () => {
  test("when a lock names this process's own pid but this process does not hold it (pid 1 restarted), then it is taken over", async () => {
    for (const holder of [
      { pid: process.pid, host: os.hostname(), started: 1, token: "earlier-run" },
      String(process.pid), // the lock format of the previous version
    ]) {
      const dir = tmp();
      const lock = await plantLock(dir, holder);
      const result = await download(dir);
      expect(result.sha256).toBe(SHA256);
      expect(existsSync(lock)).toBe(false);
    }
  });

  test("when a live process's lock has a heartbeat, then the pull is refused naming the lock; once it is 60 s old, it is taken over", async () => {
    const dir = tmp();
    // pid 1 is alive on this host (as in a container): only the heartbeat tells.
    const lock = await plantLock(dir, { pid: 1, host: os.hostname(), started: 1, token: "other" });
    const err = await download(dir).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DownloadError);
    expect((err as DownloadError).kind).toBe("busy");
    expect((err as Error).message).toContain(`lock ${lock}`);
    expect((err as Error).message).toContain("pid 1 on " + os.hostname());

    const old = new Date(Date.now() - 61_000);
    utimesSync(lock, old, old);
    expect((await inspectPullLock(lock)).state).toBe("stale");
    expect((await download(dir)).sha256).toBe(SHA256);
  });

  test("when a pull runs, then it refreshes its lock's modification time (the heartbeat)", async () => {
    const dir = tmp();
    const held = hub.holdNextAfter(100_000);
    const pull = download(dir, { lockStaleMs: 600 });
    await held.sent;
    const lock = partialPath(path.join(dir, "hub-tiny.gguf")) + ".lock";
    const holder = JSON.parse(readFileSync(lock, "utf8"));
    expect(holder).toMatchObject({ pid: process.pid, host: os.hostname() });
    expect(holder.started).toBeGreaterThan(0);
    // The heartbeat (every lockStaleMs / 6 = 100 ms) keeps moving the modification time on:
    // sampled twice, each compared with the one before, not with the clock, so a loaded machine
    // cannot fail it and a heartbeat that beats once and dies does.
    const first = statSync(lock).mtimeMs;
    await new Promise((r) => setTimeout(r, 750));
    const second = statSync(lock).mtimeMs;
    expect(second).toBeGreaterThan(first);
    await new Promise((r) => setTimeout(r, 750));
    expect(statSync(lock).mtimeMs).toBeGreaterThan(second);
    held.release();
    await pull;
    expect(existsSync(lock)).toBe(false);
  });

  test("when several processes take over one stale lock at the same moment, then exactly one wins", async () => {
    const dir = tmp();
    const lock = await plantLock(dir, { pid: 1, host: "elsewhere", started: 1, token: "dead" }, 120_000);
    const contenders = Array.from({ length: 6 }, () => {
      const child = spawn(process.execPath, ["--import", LOADER, CONTENDER, lock], {
        stdio: ["pipe", "pipe", "pipe"],
      });
      child.stdin.on("error", () => undefined); // a busy contender has exited: EPIPE
      let out = "";
      const seen = (word: string) =>
        new Promise<void>((resolve) => {
          const check = () => out.includes(word) && resolve();
          child.stdout.on("data", check);
          check();
        });
      child.stdout.on("data", (c: Buffer) => (out += c.toString()));
      child.stderr.on("data", (c: Buffer) => (out += c.toString()));
      const exited = new Promise<void>((resolve) => child.once("close", () => resolve()));
      const result = () => out.replace("ready\n", "").trim();
      return { child, seen, exited, result };
    });
    // All loaded first (the loader takes seconds on a busy machine), then all go at once.
    await Promise.all(contenders.map((c) => c.seen("ready")));
    for (const c of contenders) c.child.stdin.write("go\n");
    await Promise.all(contenders.map((c) => Promise.race([c.seen("won"), c.seen("busy"), c.exited])));
    const results = contenders.map((c) => c.result());
    for (const c of contenders) c.child.stdin.end("release\n");
    await Promise.all(contenders.map((c) => c.exited));
    expect(results.sort()).toEqual(["busy", "busy", "busy", "busy", "busy", "won"]);
    expect(existsSync(lock)).toBe(false);
  }, 30_000);

  test("when a lock judged stale was replaced by a live one before the takeover, then the takeover leaves the live one alone", async () => {
    const dir = tmp();
    const lock = await plantLock(dir, { pid: 1, host: "elsewhere", started: 1, token: "dead" }, 120_000);
    const judged = await inspectPullLock(lock);
    if (judged.state !== "stale") throw new Error("expected a stale lock");
    // Meanwhile another process took it over: a fresh lock of a live process (pid 1 on this host).
    const fresh = JSON.stringify({ pid: 1, host: os.hostname(), started: 1, token: "winner" });
    writeFileSync(`${lock}.new`, fresh);
    await rename(`${lock}.new`, lock);
    expect(await takeOverStaleLock(lock, judged, 60_000)).toBe(false);
    expect(readFileSync(lock, "utf8")).toBe(fresh);

    // While another takeover holds the gate, none happens; a gate left by a dead process (old) is cleared.
    const again = await plantLock(dir, { pid: 1, host: "elsewhere", started: 1, token: "dead" }, 120_000);
    const stale = await inspectPullLock(again);
    if (stale.state !== "stale") throw new Error("expected a stale lock");
    writeFileSync(`${again}.takeover`, "1");
    expect(await takeOverStaleLock(again, stale, 60_000)).toBe(false);
    expect(existsSync(again)).toBe(true);
    const old = new Date(Date.now() - 11_000);
    utimesSync(`${again}.takeover`, old, old);
    expect(await takeOverStaleLock(again, stale, 60_000)).toBe(false); // clears the dead gate
    expect(await takeOverStaleLock(again, stale, 60_000)).toBe(true);
    expect(existsSync(again)).toBe(false);
  });

  test("when models rm runs, then a dead pull's lock is cleared, and a live pull stops it naming the lock", async () => {
    const dirs = { modelsDir: tmp(), dataDir: tmp() };
    const lock = await plantLock(dirs.modelsDir, { pid: 1, host: "elsewhere", started: 1, token: "x" }, 120_000);
    expect(await removeModel(hubModel(), dirs)).toContain(lock);
    expect(existsSync(lock)).toBe(false);

    writeFileSync(path.join(dirs.modelsDir, "hub-tiny.gguf"), BYTES);
    await mkdir(path.dirname(lock), { recursive: true });
    const held = await acquirePullLock(lock);
    try {
      await expect(removeModel(hubModel(), dirs)).rejects.toThrow(`lock ${lock}`);
      expect(existsSync(path.join(dirs.modelsDir, "hub-tiny.gguf"))).toBe(true);
    } finally {
      await held.release();
    }
  });
});

describe("a second pull of the same file (finding 2)", () => {
  test("when another pull holds the file, then the second waits for it, reporting progress, and uses the installed file", async () => {
    const dirs = { modelsDir: tmp(), dataDir: tmp() };
    const held = hub.holdNextAfter(200_000);
    const first = pullModel(hubModel(), dirs, { endpoint: hub.url });
    await held.sent;
    const waits: PullWait[] = [];
    const second = pullModel(hubModel(), dirs, {
      endpoint: hub.url,
      wait: { timeoutMs: 20_000, pollMs: 50, onWait: (w) => waits.push(w) },
    });
    await new Promise((r) => setTimeout(r, 300));
    held.release();
    expect(await first).toMatchObject({ kind: "downloaded" });
    expect(await second).toEqual({
      kind: "present",
      path: path.join(dirs.modelsDir, "hub-tiny.gguf"),
      pulledByOther: true,
    });
    expect(waits.length).toBeGreaterThan(0);
    expect(waits[0]).toMatchObject({ holder: { pid: process.pid }, partBytes: 200_000 });
    expect(waits[0].lockPath).toMatch(/\.partial\/hub-tiny\.gguf\.part\.lock$/);
  });

  test("when the other pull outlasts the bound, then the wait gives up with the lock named", async () => {
    const dirs = { modelsDir: tmp(), dataDir: tmp() };
    const held = hub.holdNextAfter(200_000);
    const first = pullModel(hubModel(), dirs, { endpoint: hub.url });
    await held.sent;
    const started = Date.now();
    const err = await pullModel(hubModel(), dirs, { endpoint: hub.url, wait: { timeoutMs: 400, pollMs: 50 } }).catch(
      (e: unknown) => e,
    );
    expect(Date.now() - started).toBeGreaterThanOrEqual(400);
    expect(err).toBeInstanceOf(DownloadError);
    expect((err as Error).message).toMatch(
      /another pull of hub-tiny\.gguf is running .*lock .*; gave up after waiting/,
    );
    held.release();
    await first;
  });

  test("when two starts pull the same model (API and worker), then the second logs the wait and does not stop", async () => {
    const dirs = { modelsDir: tmp(), dataDir: tmp() };
    const catalog: Catalog = { defaultModel: "hub-tiny", models: [hubModel()] };
    const settings = { ...dirs, pullOnStart: ["hub-tiny"], allowModelDownload: false, hfEndpoint: hub.url };
    const held = hub.holdNextAfter(200_000);
    const logsA = captureLogs("info");
    const logsB = captureLogs("info");
    const a = pullAtStart(catalog, settings, logsA.logger);
    await held.sent;
    const b = pullAtStart(catalog, { ...settings, pullWaitPollMs: 50 }, logsB.logger);
    await new Promise((r) => setTimeout(r, 300));
    held.release();
    await a;
    await b;
    const waiting = logsB.records().find((r) => r.msg === "waiting for another process's pull of the model file");
    expect(waiting).toMatchObject({ model: "hub-tiny", holder: { pid: process.pid }, total: BYTES.length });
    expect(logsB.records().some((r) => r.msg === "model file pulled by another process")).toBe(true);
  });
});

describe("size cap (finding 3)", () => {
  test("when a server sends an endless chunked body, then the download is cut past the catalog's size and nothing stays", async () => {
    hub.serve("/test-org/endless-GGUF/resolve/main/hub-tiny.gguf", BYTES, { endless: true });
    const dir = tmp();
    const err = await download(dir, { source: "hf:test-org/endless-GGUF/hub-tiny.gguf" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DownloadError);
    expect((err as DownloadError).kind).toBe("size");
    expect((err as Error).message).toContain(`sent more than the expected ${BYTES.length} bytes`);
    expect(existsSync(path.join(dir, "hub-tiny.gguf"))).toBe(false);
    expect(existsSync(partialPath(path.join(dir, "hub-tiny.gguf")))).toBe(false);
  }, 15_000);

  test("when a chunked body has the right size, then it installs; a Content-Length other than the catalog's is refused", async () => {
    hub.serve("/test-org/chunked-GGUF/resolve/main/hub-tiny.gguf", BYTES, { chunked: true });
    const ok = await download(tmp(), { source: "hf:test-org/chunked-GGUF/hub-tiny.gguf" });
    expect(ok.sha256).toBe(SHA256);
    const err = await download(tmp(), { sizeBytes: BYTES.length - 1, sha256: undefined }).catch((e: unknown) => e);
    expect((err as DownloadError).kind).toBe("size");
  });
});

describe("credentials (finding 4)", () => {
  test("when HF_TOKEN is set, then it goes to HF_ENDPOINT's origin only: not to a source on another host, nor after a redirect there", async () => {
    const other = await startFakeHub();
    try {
      other.serve("/files/hub-tiny.gguf", BYTES);
      // A source URL on another host.
      await download(tmp(), { source: `${other.url}/files/hub-tiny.gguf`, token: "hf_secret" });
      expect(other.requests.at(-1)).toMatchObject({ status: 200, authorization: undefined });
      // The hub redirects to another origin (a CDN): the token went to the hub only.
      hub.redirect("/test-org/cdn-GGUF/resolve/main/hub-tiny.gguf", `${other.url}/files/hub-tiny.gguf`, '"linked"');
      const before = other.requests.length;
      await download(tmp(), { source: "hf:test-org/cdn-GGUF/hub-tiny.gguf", token: "hf_secret" });
      expect(gets("/test-org/cdn-GGUF/resolve/main/hub-tiny.gguf").at(-1)).toMatchObject({
        status: 302,
        authorization: "Bearer hf_secret",
      });
      expect(other.requests.slice(before)).toEqual([
        expect.objectContaining({ status: 200, authorization: undefined }),
      ]);
    } finally {
      await other.close();
    }
  });

  test("when HF_ENDPOINT holds user:pass@, then they are sent as basic authentication and never shown in a message", async () => {
    const endpoint = hub.url.replace("http://", "http://mirror-user:s3cret-pw@");
    await download(tmp(), { endpoint });
    expect(gets(HUB_PATH).at(-1)!.authorization).toBe(
      `Basic ${Buffer.from("mirror-user:s3cret-pw").toString("base64")}`,
    );
    const err = await download(tmp(), { endpoint, source: "hf:test-org/none-GGUF/hub-tiny.gguf" }).catch(
      (e: unknown) => e,
    );
    expect((err as Error).message).toMatch(/answered HTTP 404/);
    expect((err as Error).message).not.toContain("s3cret-pw");
    expect((err as Error).message).not.toContain("mirror-user");
  });

  test("when HF_ENDPOINT is plain http to another host, then the configuration is refused (https, or http on loopback only)", () => {
    const dataDir = tmp();
    expect(() => loadConfig({ SWITCHYARD_DATA_DIR: dataDir, HF_ENDPOINT: "http://hf-mirror.example" })).toThrow(
      /HF_ENDPOINT: expected an https URL \(plain http only on a loopback host\)/,
    );
    expect(() => loadConfig({ SWITCHYARD_DATA_DIR: dataDir, HF_ENDPOINT: "http://u:p@hf-mirror.example" })).not.toThrow(
      /u:p/,
    );
    expect(loadConfig({ SWITCHYARD_DATA_DIR: dataDir, HF_ENDPOINT: "http://127.0.0.1:9" }).hfEndpoint).toBe(
      "http://127.0.0.1:9",
    );
    expect(loadConfig({ SWITCHYARD_DATA_DIR: dataDir, HF_ENDPOINT: "https://hf-mirror.example" }).hfEndpoint).toBe(
      "https://hf-mirror.example",
    );
    expect(() => loadConfig({ SWITCHYARD_DATA_DIR: dataDir, HF_ENDPOINT: "http://hf-mirror.example" })).toThrow(
      ConfigError,
    );
  });
});

describe("resuming one version only (finding 5)", () => {
  test.each([
    ["honours If-Range", false],
    ["ignores If-Range", true],
  ])(
    "when the file changed between an interrupted pull and the next, and the server %s, then the new version is fetched whole, never spliced",
    async (_label, ignoreIfRange) => {
      const hubPath = `/test-org/moving-${String(ignoreIfRange)}-GGUF/resolve/main/hub-tiny.gguf`;
      const source = `hf:test-org/moving-${String(ignoreIfRange)}-GGUF/hub-tiny.gguf`;
      hub.serve(hubPath, BYTES, { ignoreIfRange });
      const dir = tmp();
      hub.cutNextAfter(400_000);
      // No catalog checksum: only the version check keeps the two apart.
      await expect(download(dir, { source, sha256: undefined })).rejects.toThrow(DownloadError);
      expect(statSync(partialPath(path.join(dir, "hub-tiny.gguf"))).size).toBe(400_000);
      hub.serve(hubPath, BYTES_B, { ignoreIfRange });
      const before = gets(hubPath).length;
      const result = await download(dir, { source, sha256: undefined });
      expect(result.sha256).toBe(sha(BYTES_B));
      expect(readFileSync(path.join(dir, "hub-tiny.gguf")).equals(BYTES_B)).toBe(true);
      const asked = gets(hubPath).slice(before);
      expect(asked[0]).toMatchObject({ range: "bytes=400000-", ifRange: hub.etagOf(BYTES) });
      expect(asked.at(-1)).toMatchObject({ status: 200 });
      expect(result.resumedFrom).toBe(0);
    },
  );
});

describe("files on disk (findings 7, 8, 9)", () => {
  test("when the file under the final name is truncated, then it is not usable, says why, and a pull replaces it", async () => {
    const dirs = { modelsDir: tmp(), dataDir: tmp() };
    const file = path.join(dirs.modelsDir, "hub-tiny.gguf");
    writeFileSync(file, BYTES.subarray(0, 1000));
    const files = new LocalModelFiles(dirs, 0);
    expect(files.missing(hubModel())).toBe(
      `not usable: ${file} is 1000 bytes, the catalog says ${BYTES.length} (an incomplete or damaged copy); ` +
        `replace it with npm run models -- pull hub-tiny (or remove it with npm run models -- rm hub-tiny)`,
    );
    expect(await pullModel(hubModel(), dirs, { endpoint: hub.url })).toMatchObject({ kind: "downloaded" });
    expect(readFileSync(file).equals(BYTES)).toBe(true);
    expect(files.missing(hubModel())).toBeUndefined();
  });

  test("when a catalog's engine.file leaves the models folder, then the catalog is refused at load", () => {
    for (const bad of ["../x.gguf", "/etc/x.gguf", "sub/x.gguf", ".hidden.gguf", "x.bin"]) {
      const file = writeEditedCatalog((c) => {
        (c.models[0].engine as { file: string }).file = bad;
      });
      expect(() => loadCatalog(file)).toThrow(/models\.0\.engine\.file: expected a bare \.gguf file name/);
    }
  });

  test("when a model's file is removed under a running server, then it is listed as not downloaded again", async () => {
    const dirs = { modelsDir: tmp(), dataDir: tmp() };
    writeFileSync(path.join(dirs.modelsDir, "hub-tiny.gguf"), BYTES);
    const files = new LocalModelFiles(dirs, 50);
    expect(files.missing(hubModel())).toBeUndefined();
    await rm(path.join(dirs.modelsDir, "hub-tiny.gguf"));
    await new Promise((r) => setTimeout(r, 60));
    expect(files.missing(hubModel())).toBe("not downloaded: run npm run models -- pull hub-tiny");
  });
});
