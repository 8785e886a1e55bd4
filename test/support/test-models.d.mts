/** Types of `test-models.mjs` (plain JS for Jest's global setup). */
export declare const REPO_ROOT: string;
export declare const TEST_MODEL_ID: string;
export declare function testModelEngine(): { file: string; source: string; size_bytes: number; sha256: string };
export declare function findTestModels(opts?: {
  root?: string;
  env?: Record<string, string | undefined>;
}): Promise<{ dir: string; how: "env" | "shared" | "data" | "fetched" }>;
