/**
 * The suite stands alone (issue 27, item 8): where Jest's global setup finds the test model
 * (`test/support/test-models.mjs`), and its fetch when it is nowhere — through the service's own
 * downloader, from a loopback hub standing in for Hugging Face (`HF_ENDPOINT`), checksum-verified.
 * Each case uses a fake repository root in a temp folder, so nothing beside the real checkout is
 * read or written.
 */
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, symlinkSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { type FakeHub, startFakeHub } from "../support/fake-hub.js";
import { MODELS_DIR } from "../support/harness.js";
import { findTestModels, testModelEngine } from "../support/test-models.mjs";

const engine = testModelEngine();
const BYTES = readFileSync(path.join(MODELS_DIR, engine.file));
/** Where the catalog's `hf:owner/repo/path` source lives on a hub. */
const HUB_PATH = (() => {
  const [owner, repo, ...rest] = engine.source.replace(/^hf:/, "").split("/");
  return `/${owner}/${repo}/resolve/main/${rest.join("/")}`;
})();

let hub: FakeHub;
beforeAll(async () => {
  hub = await startFakeHub();
});
afterAll(() => hub.close());

/** A fake checkout `<tmp>/repo` (nothing beside it unless a test puts it there). */
function fakeRoot(): { root: string; parent: string } {
  const parent = mkdtempSync(path.join(os.tmpdir(), "switchyard-test-models-"));
  const root = path.join(parent, "repo");
  mkdirSync(root);
  return { root, parent };
}

const sha256 = (file: string) => createHash("sha256").update(readFileSync(file)).digest("hex");
const hubGets = () => hub.requests.filter((r) => r.path === HUB_PATH).length;

test("the catalog entry the fetch follows is the file the tests use", () => {
  expect(BYTES.length).toBe(engine.size_bytes);
  expect(createHash("sha256").update(BYTES).digest("hex")).toBe(engine.sha256);
});

test("when no folder holds the model, then it is fetched from the hub into .data/models, verified, and found there next time", async () => {
  hub.serve(HUB_PATH, BYTES);
  const { root } = fakeRoot();
  const before = hubGets();
  const env = { HF_ENDPOINT: hub.url };
  const first = await findTestModels({ root, env });
  expect(first).toEqual({ dir: path.join(root, ".data/models"), how: "fetched" });
  expect(sha256(path.join(first.dir, engine.file))).toBe(engine.sha256);
  expect(hubGets()).toBe(before + 1);

  const second = await findTestModels({ root, env });
  expect(second).toEqual({ dir: path.join(root, ".data/models"), how: "data" });
  expect(hubGets()).toBe(before + 1);
}, 60_000);

test("when the hub sends other bytes of the same size, then the checksum refuses them and nothing is installed", async () => {
  hub.serve(HUB_PATH, Buffer.from(BYTES.map((b, i) => (i === 1000 ? b ^ 0xff : b))));
  const { root } = fakeRoot();
  await expect(findTestModels({ root, env: { HF_ENDPOINT: hub.url } })).rejects.toThrow(/SHA-256 mismatch/);
  const dir = path.join(root, ".data/models");
  expect(existsSync(path.join(dir, engine.file))).toBe(false);
  expect(readdirSync(dir).filter((f) => !f.startsWith("."))).toEqual([]);
}, 60_000);

test("when ../shared/models holds the model but no variable names it, then nothing outside the repository is read: it is fetched into .data/models", async () => {
  hub.serve(HUB_PATH, BYTES);
  const { root, parent } = fakeRoot();
  mkdirSync(path.join(parent, "shared/models"), { recursive: true });
  symlinkSync(path.join(MODELS_DIR, engine.file), path.join(parent, "shared/models", engine.file));
  expect(await findTestModels({ root, env: { HF_ENDPOINT: hub.url } })).toEqual({
    dir: path.join(root, ".data/models"),
    how: "fetched",
  });
}, 60_000);

test("when SWITCHYARD_MODELS_DIR is set, then it wins, resolved against the repository root", async () => {
  const { root, parent } = fakeRoot();
  mkdirSync(path.join(parent, "elsewhere"));
  symlinkSync(path.join(MODELS_DIR, engine.file), path.join(parent, "elsewhere", engine.file));
  expect(await findTestModels({ root, env: { SWITCHYARD_MODELS_DIR: "../elsewhere" } })).toEqual({
    dir: path.join(parent, "elsewhere"),
    how: "env",
  });
});

test("when the model is missing and downloads are off, then the error names the folder and the settings", async () => {
  const { root } = fakeRoot();
  await expect(findTestModels({ root, env: { SWITCHYARD_ALLOW_MODEL_DOWNLOAD: "false" } })).rejects.toThrow(
    `is not in ${path.join(root, ".data/models")} and SWITCHYARD_ALLOW_MODEL_DOWNLOAD=false`,
  );
});
