/**
 * Several API processes on one machine (issue 31, item 1) through real processes: `node
 * src/main.ts` with `SWITCHYARD_API_PROCESSES=2` supervises two API processes sharing one port
 * and a worker process, on the embedded PostgreSQL it owns. Connections are spread over both API
 * processes (their access logs carry their pids); a SIGKILLed API process is restarted while the
 * other serves; SIGTERM stops every child, then PostgreSQL.
 */
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { type ChildServer, alive, cleanUpChildren, launchChild } from "./support/child-server.js";
import { CHAT_MODEL, createTestCaller, eventually, http } from "./support/harness.js";

let dataDir: string;
let supervisor: ChildServer;
const records: Array<Record<string, unknown>> = [];

beforeAll(async () => {
  dataDir = mkdtempSync(path.join(os.tmpdir(), "sy-api-processes-"));
  supervisor = await launchChild({
    dataDir,
    readyMessage: "Switchyard supervisor ready",
    // Three Switchyards start at once (each loads the test models): more than one's 45 s on a busy machine.
    startupTimeoutMs: 100_000,
    // Debug: JSON access logs (one line per request, with the serving process's pid) are debug lines.
    env: { SWITCHYARD_API_PROCESSES: "2", SWITCHYARD_WORKER_NICE: "0", LOG_LEVEL: "debug" },
    onLog: (r) => records.push(r),
  });
}, 120_000);

afterAll(async () => {
  await cleanUpChildren(dataDir);
});

/** The pids of the supervisor's children of `role`, as its ready record lists them. */
function childPids(role: string): number[] {
  const pids = supervisor.ready.pids as Array<{ role: string; pid: number }>;
  return pids.filter((p) => p.role === role).map((p) => p.pid);
}

/** GET `path` on a fresh connection (so the supervisor hands each to the next API process). */
async function fresh(pathname: string): Promise<number> {
  const res = await fetch(`${supervisor.url}${pathname}`, { headers: { connection: "close" } });
  await res.arrayBuffer();
  return res.status;
}

describe("SWITCHYARD_API_PROCESSES=2", () => {
  test("when the supervisor is ready, then two API processes and one worker run beside it on one port", () => {
    expect(supervisor.ready).toMatchObject({ apiProcesses: 2, workerProcess: true });
    expect(supervisor.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const api = childPids("api");
    expect(api).toHaveLength(2);
    expect(childPids("worker")).toHaveLength(1);
    for (const pid of [...api, ...childPids("worker")]) expect(alive(pid)).toBe(true);
    expect(new Set([...api, supervisor.child.pid])).toHaveProperty("size", 3);
    // Each API process said it listens, on the same port.
    const listening = records.filter((r) => r.msg === "Switchyard listening");
    expect(listening.map((r) => r.pid).sort()).toEqual([...api].sort());
    expect(new Set(listening.map((r) => r.url))).toEqual(new Set([supervisor.url]));
  });

  test("when connections come one after another, then both API processes serve them", async () => {
    const marker = `/v1/health?spread=${Date.now()}`;
    for (let i = 0; i < 8; i++) expect(await fresh(marker)).toBe(200);
    const served = () => records.filter((r) => r.msg === "request" && r.path === marker);
    await eventually(async () => served().length >= 8, 10_000);
    const servedBy = new Set(served().map((r) => r.pid));
    expect([...servedBy].sort()).toEqual([...childPids("api")].sort());
  });

  test("when a caller signs up and chats, then any API process answers it from the shared database", async () => {
    const caller = await createTestCaller(supervisor.url);
    for (let i = 0; i < 4; i++) {
      const res = await fetch(`${supervisor.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${caller.key}`, "content-type": "application/json", connection: "close" },
        body: JSON.stringify({ model: CHAT_MODEL, messages: [{ role: "user", content: "Once" }], max_tokens: 4 }),
      });
      expect([res.status, await res.text()]).toEqual([200, expect.stringContaining('"chat.completion"')]);
    }
    // Each answer was charged once, whichever process served it.
    const activity = await http(supervisor.url, "GET", "/control/v1/activity", { token: caller.token });
    expect(activity.status).toBe(200);
    const rows = (activity.body.data ?? activity.body.items ?? activity.body) as unknown[];
    expect(rows).toHaveLength(4);
  }, 60_000);

  test("when an API process is SIGKILLed, then the other keeps serving and the supervisor starts a new one", async () => {
    const [victim, survivor] = childPids("api");
    process.kill(victim, "SIGKILL");
    // Once the supervisor knows, every connection goes to the survivor until the new one is up.
    await eventually(async () => records.some((r) => r.msg === "a Switchyard process exited; restarting it"), 10_000);
    for (let i = 0; i < 4; i++) expect(await fresh("/v1/health")).toBe(200);
    await eventually(async () => records.some((r) => r.msg === "Switchyard process back" && r.role === "api"), 30_000);
    const back = records.find((r) => r.msg === "Switchyard process back")!;
    expect(back.pid).not.toBe(victim);
    expect(alive(back.pid as number)).toBe(true);
    expect(alive(survivor)).toBe(true);
    expect(records.find((r) => r.msg === "a Switchyard process exited; restarting it")).toMatchObject({
      role: "api",
      pid: victim,
      signal: "SIGKILL",
    });
  }, 60_000);

  test("when the supervisor gets SIGTERM, then every child stops, then PostgreSQL, and it exits 0", async () => {
    const children = [
      ...childPids("worker"),
      ...childPids("api"),
      ...records.filter((r) => r.msg === "Switchyard process back").map((r) => r.pid as number),
    ].filter(alive);
    expect(children.length).toBeGreaterThanOrEqual(3);
    process.kill(supervisor.child.pid!, "SIGTERM");
    expect(await supervisor.exited).toEqual({ code: 0, signal: null });
    for (const pid of children) expect([pid, alive(pid)]).toEqual([pid, false]);
    expect(alive(supervisor.pgPid)).toBe(false);
  }, 60_000);
});
