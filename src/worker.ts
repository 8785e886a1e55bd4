/**
 * `npm run worker` (issue 6, item 1): Switchyard with `SWITCHYARD_ROLE=worker` — the job queue's
 * workers (background responses) only, no HTTP, against the database the API processes use
 * (`DATABASE_URL`). Shutdown as `npm start`: SIGINT/SIGTERM let running jobs finish.
 */
process.env.SWITCHYARD_ROLE = "worker";
await import("./main.js");
