/**
 * Runs the TypeScript sources directly in a child process (`node --import
 * ./test/support/swc-loader.mjs src/main.ts`), compiled by SWC exactly as Jest compiles them
 * (legacy decorators with metadata, which tsx/esbuild cannot emit). Tests that need Switchyard as
 * a real process (signals, SIGKILL, restarts) use it instead of a slow `tsc` build.
 */
import { readFile } from "node:fs/promises";
import { register } from "node:module";
import { isMainThread } from "node:worker_threads";

if (isMainThread) register(import.meta.url);

const swcOptions = {
  jsc: {
    target: "es2022",
    parser: { syntax: "typescript", decorators: true },
    transform: { legacyDecorator: true, decoratorMetadata: true, useDefineForClassFields: false },
    keepClassNames: true,
  },
  module: { type: "es6" },
  sourceMaps: "inline",
};

/** `./x.js` imports of TypeScript sources resolve to `./x.ts`. */
export async function resolve(specifier, context, next) {
  try {
    return await next(specifier, context);
  } catch (err) {
    if (err?.code !== "ERR_MODULE_NOT_FOUND" || !/^\.{1,2}\/.*\.js$/.test(specifier)) throw err;
    return next(specifier.replace(/\.js$/, ".ts"), context);
  }
}

/** `.ts` files are compiled by SWC. */
export async function load(url, context, next) {
  if (!url.startsWith("file:") || !url.endsWith(".ts")) return next(url, context);
  const { transform } = await import("@swc/core");
  const source = await readFile(new URL(url), "utf8");
  const { code } = await transform(source, { ...swcOptions, filename: new URL(url).pathname });
  return { format: "module", source: code, shortCircuit: true };
}
