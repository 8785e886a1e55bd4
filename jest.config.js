/**
 * Jest runs the TypeScript sources as native ES modules through SWC (legacy decorators with
 * metadata, as tsc emits them). Global setup starts one real PostgreSQL and a migrated template
 * database; each test file clones its own database from it, so files run in parallel.
 */
const swc = {
  jsc: {
    target: "es2022",
    parser: { syntax: "typescript", decorators: true },
    transform: { legacyDecorator: true, decoratorMetadata: true, useDefineForClassFields: false },
    keepClassNames: true,
  },
  module: { type: "es6" },
  sourceMaps: "inline",
};

export default {
  testEnvironment: "node",
  extensionsToTreatAsEsm: [".ts"],
  transform: { "^.+\\.ts$": ["@swc/jest", swc] },
  moduleNameMapper: { "^(\\.{1,2}/.*)\\.js$": "$1" },
  testMatch: ["<rootDir>/test/**/*.test.ts"],
  globalSetup: "<rootDir>/test/support/global-setup.mjs",
  // pg-boss's delay() without its per-call require (see the file).
  setupFiles: ["<rootDir>/test/support/pg-boss-timers.cjs"],
  globalTeardown: "<rootDir>/test/support/global-teardown.mjs",
  testTimeout: 20_000,
  maxWorkers: 2,
  reporters: ["default", "<rootDir>/test/support/summary-reporter.mjs"],
};
