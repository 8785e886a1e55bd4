/**
 * Restart safety (issue 5, item 5) through real processes: Switchyard runs as a child process
 * (`node src/main.ts`, compiled by SWC as Jest does) on the embedded PostgreSQL of its own data
 * folder, and is killed, interrupted and restarted the way an operator would.
 *
 * The tests run in order on one data folder (initialising a cluster costs seconds): each leaves
 * it with a running Switchyard (`current`) or none, and creates its own caller.
 */
import { execFileSync, spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import {
  type ChildServer,
  ChildStartError,
  alive,
  cleanUpChildren,
  embeddedSql,
  launchChild,
} from "./support/child-server.js";
import { CHAT_MODEL, createTestCaller, http } from "./support/harness.js";

let dataDir: string;
let current: ChildServer | undefined;

/** `node src/main.ts` on `dataDir`, in a process group of its own, on its embedded PostgreSQL. */
function launch(env: Record<string, string> = {}): Promise<ChildServer> {
  return launchChild({ dataDir, env: { SWITCHYARD_JWT_SECRET: "restart-test-secret-restart-test-secret", ...env } });
}

/** A start expected to fail: its exit code and stderr. */
async function launchFailing(): Promise<{ code: number | null; stderr: string }> {
  try {
    const running = await launch();
    process.kill(-running.child.pid!, "SIGKILL");
    throw new Error("Switchyard started although it should not have");
  } catch (err) {
    if (!(err instanceof ChildStartError)) throw err;
    return { code: err.code, stderr: err.stderr };
  }
}

/**
 * A live process that PostgreSQL itself cannot tell from a postmaster holding its lock: one of
 * the user PostgreSQL runs as (`postgres` when we are root; PostgreSQL takes a process it may not
 * signal for a stale lock's).
 */
function livePostgresUserProcess(): { pid: number; kill(): void } {
  const asRoot = process.getuid?.() === 0;
  const id = (flag: string) => Number.parseInt(execFileSync("id", [flag, "postgres"], { encoding: "utf8" }), 10);
  const sleeper = spawn("sleep", ["120"], { stdio: "ignore", ...(asRoot ? { uid: id("-u"), gid: id("-g") } : {}) });
  return { pid: sleeper.pid!, kill: () => sleeper.kill("SIGKILL") };
}

/** SQL against the embedded cluster of `running`. */
function sql<T>(running: ChildServer, text: string, params: unknown[] = []): Promise<T[]> {
  return embeddedSql<T>(dataDir, running.pgPort, text, params);
}

const chat = (customId: string) => ({
  model: CHAT_MODEL,
  messages: [{ role: "user", content: "Once upon a time" }],
  max_tokens: 48,
  temperature: 0,
  metadata: { custom_id: customId },
});

/**
 * Sends `n` chat completions at once and calls `interrupt` as soon as the first is answered 200,
 * while the others are still queued or decoding. Resolves with each request's status (or
 * "error" when its connection broke).
 */
async function burstThen(
  running: ChildServer,
  key: string,
  prefix: string,
  n: number,
  interrupt: () => void,
): Promise<Array<{ customId: string; status: number | "error" }>> {
  let interrupted = false;
  const requests = Array.from({ length: n }, async (_, i) => {
    const customId = `${prefix}-${i}`;
    const status = await http(running.url, "POST", "/v1/chat/completions", { token: key, body: chat(customId) }).then(
      (res) => res.status,
      () => "error" as const,
    );
    if (status === 200 && !interrupted) {
      interrupted = true;
      interrupt();
    }
    return { customId, status };
  });
  return Promise.all(requests);
}

/** Every request in `answered` has its completed activity row and its usage charge. */
async function expectRecordedAndCharged(running: ChildServer, teamId: string, answered: string[]): Promise<void> {
  const rows = await sql<{ custom_id: string; status: string; cost_micros: string; amount_micros: string | null }>(
    running,
    `SELECT a.custom_id, a.status, a.cost_micros::text, l.amount_micros::text
       FROM activity a LEFT JOIN credit_ledger l ON l.type = 'usage' AND l.source_id = a.id::text
      WHERE a.team_id = $1 AND a.custom_id = ANY($2)`,
    [teamId, answered],
  );
  expect(rows.map((r) => r.custom_id).sort()).toEqual([...answered].sort());
  for (const row of rows) {
    expect(row.status).toBe("completed");
    expect(BigInt(row.cost_micros)).toBeGreaterThan(0n);
    expect(row.amount_micros).not.toBeNull();
    expect(BigInt(row.amount_micros!)).toBe(-BigInt(row.cost_micros));
  }
  // The balance is still the ledger's sum: nothing was half-written.
  const [team] = await sql<{ balance: string; ledger: string }>(
    running,
    `SELECT t.credit_balance_micros::text AS balance,
            (SELECT sum(amount_micros) FROM credit_ledger WHERE team_id = t.id)::text AS ledger
       FROM teams t WHERE t.id = $1`,
    [teamId],
  );
  expect(team.balance).toBe(team.ledger);
}

beforeAll(async () => {
  dataDir = mkdtempSync(path.join(os.tmpdir(), "switchyard-restart-"));
}, 10_000);

afterAll(() => cleanUpChildren(dataDir), 20_000);

describe("restart safety of the embedded PostgreSQL", () => {
  // Both durability modes (README "Durability", issue 12 item 1) promise the same for a crash of
  // the Switchyard process: every answered request is recorded and charged.
  test.each([
    ["database", {}],
    ["process", { SWITCHYARD_DURABILITY: "process" }],
  ])(
    "when the node process is SIGKILLed with requests in flight (durability %s), then the next start comes up on the same data folder and every answered request is recorded and charged",
    async (mode, env) => {
      if (current) {
        current.child.kill("SIGTERM");
        await current.exited;
        current = undefined;
      }
      let first = await launch(env);
      const caller = await createTestCaller(first.url);
      let answered: string[] = [];
      // Precondition: some requests were cut off in flight. On a loaded machine this test's process
      // can read every answer before its kill lands; then the round still must hold (all recorded)
      // and another round is tried on the restarted server.
      for (let round = 0; ; round++) {
        const killed = first;
        const results = await burstThen(killed, caller.key, `kill-${mode}-${round}`, 24, () =>
          process.kill(killed.child.pid!, "SIGKILL"),
        );
        expect((await killed.exited).signal).toBe("SIGKILL");
        answered = results.filter((r) => r.status === 200).map((r) => r.customId);
        expect(answered.length).toBeGreaterThan(0);
        expect(alive(killed.pgPid)).toBe(true); // what the next start has to deal with

        current = await launch(env);
        expect(current.pgPid).not.toBe(killed.pgPid);
        expect(alive(killed.pgPid)).toBe(false);
        const ready = await http(current.url, "GET", "/v1/health/ready");
        expect(ready.status).toBe(200);
        await expectRecordedAndCharged(current, caller.teamId, answered);
        if (answered.length < results.length || round === 2) {
          expect(answered.length).toBeLessThan(results.length);
          break;
        }
        first = current;
      }
      // The data plane works after the restart, for the same key.
      expect(
        (await http(current.url, "POST", "/v1/chat/completions", { token: caller.key, body: chat("after") })).status,
      ).toBe(200);
    },
    150_000,
  );

  test("when a terminal's Ctrl-C reaches Switchyard's process group, then in-flight requests complete and are recorded, and PostgreSQL is stopped last", async () => {
    const running = current ?? (await launch());
    current = undefined;
    const caller = await createTestCaller(running.url);
    const results = await burstThen(running, caller.key, "ctrl-c", 24, () =>
      process.kill(-running.child.pid!, "SIGINT"),
    );
    expect(results.filter((r) => r.status !== 200)).toEqual([]);
    expect(await running.exited).toEqual({ code: 0, signal: null });
    expect(alive(running.pgPid)).toBe(false);
    expect(existsSync(path.join(dataDir, "pg", "postmaster.pid"))).toBe(false);
    expect(existsSync(path.join(dataDir, "pg.owner"))).toBe(false);

    current = await launch();
    await expectRecordedAndCharged(
      current,
      caller.teamId,
      results.map((r) => r.customId),
    );
  }, 60_000);

  test("when another live Switchyard holds the data folder, then a second start exits with one line saying so, and the first keeps serving", async () => {
    const running = current ?? (await launch());
    current = running;
    const { code, stderr } = await launchFailing();
    expect(code).toBe(1);
    expect(stderr.trim().split("\n")).toEqual([
      expect.stringMatching(new RegExp(`^switchyard: .*in use by another Switchyard \\(pid ${running.child.pid}\\)`)),
    ]);
    expect((await http(running.url, "GET", "/v1/health/ready")).status).toBe(200);
    expect(alive(running.pgPid)).toBe(true);
  }, 60_000);

  test.each([
    ["a dead process", () => ({ pid: spawnSync("true").pid, kill: () => undefined })],
    ["a live process that is not PostgreSQL (its pid was reused)", livePostgresUserProcess],
  ])(
    "when postmaster.pid names %s, then Switchyard starts anyway",
    async (_what, staleProcess) => {
      const running = current ?? (await launch());
      current = undefined;
      const lockFile = path.join(dataDir, "pg", "postmaster.pid");
      const lock = readFileSync(lockFile, "utf8").split("\n");
      running.child.kill("SIGTERM");
      expect(await running.exited).toEqual({ code: 0, signal: null });
      const stale = staleProcess();
      try {
        lock[0] = String(stale.pid);
        writeFileSync(lockFile, lock.join("\n"));
        current = await launch();
        expect((await http(current.url, "GET", "/v1/health/ready")).status).toBe(200);
      } finally {
        stale.kill();
      }
    },
    60_000,
  );

  test("when the last Switchyard is stopped with SIGTERM, then no PostgreSQL is left running", async () => {
    const running = current ?? (await launch());
    current = undefined;
    running.child.kill("SIGTERM");
    expect(await running.exited).toEqual({ code: 0, signal: null });
    expect(alive(running.pgPid)).toBe(false);
  }, 60_000);
});
