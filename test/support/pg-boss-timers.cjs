/**
 * Test-only: pg-boss's `delay()` loads `node:timers/promises` on every call. A call that comes
 * after a test file's Jest environment was torn down (pg-boss's once-a-second watch over its
 * stopping workers can outlive a file) then throws "require after teardown" and fails whichever
 * suite runs next in that worker. Here the module is loaded once, before pg-boss, and `delay`
 * uses it — same behaviour (a promise that resolves after `ms`, or at once on `abort()`, and
 * rejects with `error` when given). Production code never loads this file.
 */
const path = require("node:path");
const { setTimeout: sleep } = require("node:timers/promises");

// The module pg-boss's own files load as "./tools" (beside its main file).
const tools = require(path.join(path.dirname(require.resolve("pg-boss")), "tools.js"));

tools.delay = function delay(ms, error) {
  const ac = new AbortController();
  const promise = new Promise((resolve, reject) => {
    sleep(ms, null, { signal: ac.signal })
      .then(() => (error ? reject(new Error(error)) : resolve()))
      .catch(resolve);
  });
  promise.abort = () => {
    if (!ac.signal.aborted) ac.abort();
  };
  return promise;
};
