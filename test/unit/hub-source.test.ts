/**
 * Where a catalog source is downloaded from (issue 17): `hf:owner/repo/path[#revision]` on
 * `HF_ENDPOINT` (Hugging Face's `resolve` URLs), http(s) URLs as they are.
 */
import { DownloadError } from "../../src/inference/artifacts/download-error.js";
import { sourceUrl } from "../../src/inference/artifacts/hub-request.js";

test("when a source is hf:owner/repo/path, then it resolves on the hub's main revision", () => {
  expect(sourceUrl("hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q8_0.gguf")).toBe(
    "https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct-GGUF/resolve/main/qwen2.5-0.5b-instruct-q8_0.gguf",
  );
  expect(sourceUrl("hf:ggml-org/models/tinyllamas/stories260K.gguf", "http://127.0.0.1:9999/")).toBe(
    "http://127.0.0.1:9999/ggml-org/models/resolve/main/tinyllamas/stories260K.gguf",
  );
});

test("when a source names a revision, then that revision is fetched", () => {
  expect(
    sourceUrl(
      "hf:nomic-ai/nomic-embed-text-v1.5-GGUF/nomic-embed-text-v1.5.Q8_0.gguf#0188c9bf",
      "https://hf-mirror.example/",
    ),
  ).toBe(
    "https://hf-mirror.example/nomic-ai/nomic-embed-text-v1.5-GGUF/resolve/0188c9bf/nomic-embed-text-v1.5.Q8_0.gguf",
  );
});

test("when a source is an http(s) URL, then it is used as it is; anything else is refused", () => {
  expect(sourceUrl("https://example.com/a.gguf")).toBe("https://example.com/a.gguf");
  expect(() => sourceUrl("hf:only-owner")).toThrow(DownloadError);
  expect(() => sourceUrl("s3://bucket/a.gguf")).toThrow(/unsupported model source/);
});
