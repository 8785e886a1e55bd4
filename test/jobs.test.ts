/**
 * The durable job queue (issue 6, item 1): pg-boss in the service's database, jobs written in the
 * same transaction as their rows, roles (`api` runs no workers; `npm run worker`'s entry runs
 * workers only, against the same database), and a clean stop.
 */
import { readFileSync, readdirSync } from "node:fs";
import os from "node:os";
import { pino } from "pino";
import { v7 as uuidv7 } from "uuid";
import { JobQueue } from "../src/jobs/job-queue.js";
import { cleanUpChildren, launchChild } from "./support/child-server.js";
import {
  CHAT_MODEL,
  type TestServer,
  createTestCaller,
  createTestDatabase,
  eventually,
  http,
  startTestServer,
} from "./support/harness.js";

function createBackground(base: string, key: string, body: Record<string, unknown> = {}) {
  return http(base, "POST", "/v1/responses", {
    token: key,
    body: { model: CHAT_MODEL, input: "Once upon a time", background: true, max_output_tokens: 8, ...body },
  });
}

/** `node src/worker.ts` (the `npm run worker` entry) on `databaseUrl`; resolves once it has started. */
function launchWorker(databaseUrl: string) {
  return launchChild({
    entry: "worker",
    databaseUrl,
    detached: false,
    // The entry overrides it: `npm run worker` always runs workers only.
    env: { SWITCHYARD_ROLE: "api", SWITCHYARD_JWT_SECRET: "jobs-test-secret-jobs-test-secret-0123" },
  });
}

/** The nice value of every thread of process `pid` (`/proc/<pid>/task/<tid>/stat`, field 19). */
function threadNices(pid: number): number[] {
  return readdirSync(`/proc/${pid}/task`).flatMap((tid) => {
    try {
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, "utf8");
      // Fields after the command's closing parenthesis start at field 3 (state).
      return [Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19 - 3])];
    } catch {
      return []; // the thread ended meanwhile
    }
  });
}

afterAll(() => cleanUpChildren());

describe("job queue", () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer();
  });
  afterAll(() => server?.close());

  test("when a background response is accepted, then its generate and deadline jobs are in pg-boss's schema, the deadline job due at the deadline", async () => {
    const caller = await createTestCaller(server.url);
    const res = await createBackground(server.url, caller.key, { timeout_s: 600 });
    expect(res.status).toBe(200);
    const jobs = await server.db<{ name: string; due: boolean }>(
      `SELECT j.name, abs(extract(epoch FROM j.start_after - r.deadline_at)) < 1 AS due
         FROM pgboss.job j JOIN responses r ON r.id = (j.data->>'responseId')::uuid
        WHERE r.id = $1 ORDER BY j.name`,
      [res.body.id],
    );
    expect(jobs.map((j) => j.name)).toEqual(["response-deadline", "response-generate"]);
    expect(jobs.find((j) => j.name === "response-deadline")!.due).toBe(true);
  });

  test("when the server is closed, then pg-boss's connections to the database are gone", async () => {
    const other = await startTestServer({}, server);
    const count = async () =>
      (
        await server.db<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_stat_activity
            WHERE application_name = 'switchyard-jobs' AND datname = current_database()`,
        )
      )[0].n;
    const before = await count();
    await other.close();
    expect(await eventually(async () => (await count()) < before, 5_000)).toBe(true);
  });
});

describe("workers", () => {
  test("when a worker has just run a job, then it fetches the next at once instead of waiting out its polling interval", async () => {
    const db = await createTestDatabase();
    const queue = new JobQueue({ databaseUrl: db.url, logger: pino({ level: "silent" }), supervise: false });
    try {
      await queue.start();
      const ids = Array.from({ length: 5 }, () => uuidv7());
      for (const responseId of ids) await queue.send("response-deadline", { responseId });
      const handled: string[] = [];
      // One worker polling once a minute: only going straight to the next job gets through all 5.
      await queue.work("response-deadline", 1, async ({ responseId }) => void handled.push(responseId), 60);
      expect(await eventually(async () => handled.length === ids.length, 15_000)).toBe(true);
      expect([...handled].sort()).toEqual([...ids].sort());
    } finally {
      await queue.stop();
      await db.close();
    }
  }, 30_000);
});

describe("roles", () => {
  test("when only an api process runs, then accepted background responses wait; the npm run worker entry, started later on the same database, runs them and stops cleanly on SIGTERM", async () => {
    const api = await startTestServer({ role: "api" });
    let worker: Awaited<ReturnType<typeof launchWorker>> | undefined;
    try {
      const caller = await createTestCaller(api.url);
      const res = await createBackground(api.url, caller.key);
      expect(res.body.status).toBe("in_progress");
      // No worker: after several polling periods it is still waiting, unclaimed.
      await new Promise((r) => setTimeout(r, 1500));
      const [row] = await api.db<{ status: string; runner: string | null }>(
        "SELECT status, runner FROM responses WHERE id = $1",
        [res.body.id],
      );
      expect(row).toEqual({ status: "in_progress", runner: null });

      worker = await launchWorker(api.databaseUrl);
      let status = "";
      await eventually(async () => {
        status = (await http(api.url, "GET", `/v1/responses/${res.body.id}`, { token: caller.key })).body.status;
        return status !== "in_progress";
      }, 30_000);
      expect(status).toBe("incomplete");
      // Issue 12, item 3: the worker process yields the CPU (SWITCHYARD_WORKER_NICE, default 10) —
      // every thread of it after it ran a generation (those that existed when the priority was set
      // and any started since, which inherit it) — while the api process (this one) keeps its
      // priority. Only measurable when this runner itself runs
      // below nice 10 (a priority is never raised, so a niced runner's worker proves nothing).
      const own = os.getPriority();
      if (own < 10) {
        const workerNices = threadNices(worker.child.pid!);
        expect(workerNices.length).toBeGreaterThan(3);
        expect(Math.min(...workerNices)).toBe(10);
        expect(threadNices(process.pid).every((n) => n === own)).toBe(true);
      }
      worker.child.kill("SIGTERM");
      expect((await worker.exited).code).toBe(0);
      worker = undefined;
    } finally {
      worker?.child.kill("SIGKILL");
      await api.close();
    }
  }, 90_000);
});
