/**
 * Where the entry points, tests and benches start Switchyard: the composition root itself lives
 * in `src/app/` (issue 25, item 4; `app/switchyard.ts` wires the parts, `app/lifecycle.ts` holds
 * the start and stop order). This file only re-exports what is imported from it.
 */
export { type StartOptions, type Switchyard, startSwitchyard } from "./app/switchyard.js";
export { SCHEMA_FILE } from "./app/graphql.js";
export { createLogger, usesPrettyLogs } from "./app/logger.js";
