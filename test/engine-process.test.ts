/**
 * One engine per machine (issue 31, item 2) through real processes: `node src/main.ts` with
 * `SWITCHYARD_API_PROCESSES=2` starts an engine process first (the catalog has embedded models),
 * then two API processes and a worker that reach it over loopback. The model file is loaded once,
 * by the engine process; the API processes never load llama.cpp (its library is not even mapped
 * in them); chats, streamed ones too, work through both API processes; a SIGKILLed engine process
 * makes chats answer 503 until the supervisor has it back on the same address; SIGTERM stops
 * everything, the engine process last.
 */
import { mkdtempSync, readFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { type ChildServer, alive, cleanUpChildren, launchChild } from "./support/child-server.js";
import { CHAT_MODEL, createTestCaller, eventually } from "./support/harness.js";

let dataDir: string;
let supervisor: ChildServer;
let caller: Awaited<ReturnType<typeof createTestCaller>>;
const records: Array<Record<string, unknown>> = [];

beforeAll(async () => {
  dataDir = mkdtempSync(path.join(os.tmpdir(), "sy-engine-process-"));
  supervisor = await launchChild({
    dataDir,
    readyMessage: "Switchyard supervisor ready",
    // An engine process, then three Switchyards: more than one's 45 s on a busy machine.
    startupTimeoutMs: 110_000,
    // Debug: the access logs (one line per request, with the serving process's pid).
    env: { SWITCHYARD_API_PROCESSES: "2", SWITCHYARD_WORKER_NICE: "0", LOG_LEVEL: "debug" },
    onLog: (r) => records.push(r),
  });
  caller = await createTestCaller(supervisor.url);
}, 130_000);

afterAll(async () => {
  await cleanUpChildren(dataDir);
});

/** The pids of the supervisor's children of `role`, as its ready record lists them. */
function childPids(role: string): number[] {
  const pids = supervisor.ready.pids as Array<{ role: string; pid: number }>;
  return pids.filter((p) => p.role === role).map((p) => p.pid);
}

/** `/proc/<pid>/status` field `name` in kB (VmRSS, …). */
function statusKb(pid: number, name: string): number {
  const line = readFileSync(`/proc/${pid}/status`, "utf8")
    .split("\n")
    .find((l) => l.startsWith(`${name}:`));
  return Number.parseInt(line!.split(/\s+/)[1], 10);
}

/** Whether node-llama-cpp's native library is mapped in process `pid`. */
function mapsLlama(pid: number): boolean {
  return /llama-addon\.node|libggml/.test(readFileSync(`/proc/${pid}/maps`, "utf8"));
}

/** One chat on a fresh connection (the supervisor hands each to the next API process). */
async function chat(stream = false): Promise<{ status: number; text: string }> {
  const res = await fetch(`${supervisor.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${caller.key}`, "content-type": "application/json", connection: "close" },
    body: JSON.stringify({
      model: CHAT_MODEL,
      messages: [{ role: "user", content: "Once upon a time" }],
      max_tokens: 8,
      stream,
    }),
  });
  return { status: res.status, text: await res.text() };
}

describe("one engine process beside SWITCHYARD_API_PROCESSES=2", () => {
  test("when the supervisor is ready, then an engine process runs beside two API processes and a worker, on loopback", () => {
    const [engine] = childPids("engine");
    expect(childPids("engine")).toHaveLength(1);
    expect(childPids("api")).toHaveLength(2);
    expect(childPids("worker")).toHaveLength(1);
    expect(alive(engine)).toBe(true);
    expect(supervisor.ready.engineProcess).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const ready = records.find((r) => r.msg === "Switchyard engine ready")!;
    expect(ready).toMatchObject({ pid: engine, url: supervisor.ready.engineProcess });
    expect(ready.models).toEqual(expect.arrayContaining([CHAT_MODEL]));
  });

  test("when the processes have started, then the model file was loaded once, by the engine process, and llama.cpp is mapped only there", () => {
    const [engine] = childPids("engine");
    const loads = records.filter((r) => r.msg === "loading model file");
    expect(loads.length).toBeGreaterThan(0);
    expect(new Set(loads.map((r) => r.pid))).toEqual(new Set([engine]));
    expect(new Set(loads.map((r) => r.path)).size).toBe(loads.length);
    expect(records.filter((r) => r.msg === "generation model ready").map((r) => r.pid)).toEqual([engine]);
    expect(mapsLlama(engine)).toBe(true);
    for (const pid of [...childPids("api"), ...childPids("worker")])
      expect([pid, mapsLlama(pid)]).toEqual([pid, false]);
    // What each process holds, for the record (memory is not asserted: it varies with the machine).
    const rss = Object.fromEntries(
      (supervisor.ready.pids as Array<{ role: string; pid: number }>).map((p) => [
        `${p.role}:${p.pid}`,
        statusKb(p.pid, "VmRSS"),
      ]),
    );
    process.stdout.write(`engine-process RSS (kB): ${JSON.stringify(rss)}\n`);
  });

  test("when chats come on fresh connections, then both API processes answer them through the engine process", async () => {
    for (let i = 0; i < 4; i++) {
      const answer = await chat();
      expect([answer.status, answer.text]).toEqual([200, expect.stringContaining('"chat.completion"')]);
    }
    const streamed = await chat(true);
    expect(streamed.status).toBe(200);
    expect(streamed.text).toContain("data: [DONE]");
    expect(streamed.text).toContain('"chat.completion.chunk"');
    const served = () => records.filter((r) => r.msg === "request" && r.path === "/v1/chat/completions");
    await eventually(async () => served().length >= 5, 10_000);
    expect(new Set(served().map((r) => r.pid))).toEqual(new Set(childPids("api")));
  }, 60_000);

  test("when the engine process is SIGKILLed, then chats answer 503 until the supervisor has it back, then 200 again", async () => {
    const [engine] = childPids("engine");
    const backs = () => records.filter((r) => r.msg === "Switchyard process back" && r.role === "engine");
    process.kill(engine, "SIGKILL");
    await eventually(async () => !alive(engine), 5_000);
    const answer = await chat();
    const backBeforeAnswer = backs().length > 0;
    // Refused at once (the restart waits at least 1 s), unless the new engine process was already up.
    expect(answer.status).toBe(backBeforeAnswer ? 200 : 503);
    if (!backBeforeAnswer) expect(JSON.parse(answer.text)).toMatchObject({ status_code: 503 });
    expect(await eventually(async () => backs().length > 0, 60_000)).toBe(true);
    expect(backs()[0].pid).not.toBe(engine);
    expect(records.find((r) => r.msg === "a Switchyard process exited; restarting it")).toMatchObject({
      role: "engine",
      pid: engine,
      signal: "SIGKILL",
    });
    // Back on the same address: the API processes reach it without being told anything.
    const again = records.filter((r) => r.msg === "Switchyard engine ready").at(-1)!;
    expect(again.url).toBe(supervisor.ready.engineProcess);
    for (let i = 0; i < 2; i++) expect((await chat()).status).toBe(200);
  }, 90_000);

  test("when the supervisor gets SIGTERM, then every child stops, the engine process too, and it exits 0", async () => {
    const backs = records.filter((r) => r.msg === "Switchyard process back").map((r) => r.pid as number);
    const children = [...childPids("worker"), ...childPids("api"), ...backs].filter(alive);
    expect(children.length).toBeGreaterThanOrEqual(4);
    process.kill(supervisor.child.pid!, "SIGTERM");
    expect(await supervisor.exited).toEqual({ code: 0, signal: null });
    for (const pid of children) expect([pid, alive(pid)]).toEqual([pid, false]);
    expect(alive(supervisor.pgPid)).toBe(false);
  }, 60_000);
});
