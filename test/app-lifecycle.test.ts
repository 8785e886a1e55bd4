/**
 * The composition root's start and stop order (issue 25, item 4): `app/lifecycle.ts` with real
 * components that record what is called, then real Switchyards (every role) whose shutdown steps
 * are read from their debug log lines (`{ step }` "stopped"), including a start that fails at
 * its last step (the port taken) and stops everything it had started, in reverse.
 */
import { type Component, COMPONENTS, Lifecycle, startOrUnwind } from "../src/app/lifecycle.js";
import { type CapturedLogs, captureLogs } from "./support/log-capture.js";
import { type TestServer, http, startTestServer } from "./support/harness.js";

/** Today's stop order of an `all`-role process on its own embedded PostgreSQL (DESIGN §2). */
const STOP_ORDER = [
  "completion events",
  "HTTP and GraphQL",
  "password reset mail",
  "body retention",
  "deployment reconciler",
  "batch runner",
  "job queue",
  "background reconciler",
  "in-flight activity",
  "webhook dispatcher",
  "metering",
  "mailer",
  "engines",
  "metering (after engines)",
  "key budget leases",
  "credit leases",
  "cache listener",
  "database pool",
  "embedded PostgreSQL",
  "tracing",
];

const WORKERS = ["body retention", "deployment reconciler", "batch runner", "background reconciler"];
const HTTP = ["completion events", "HTTP and GraphQL", "password reset mail"];
/** The harness gives every server a `DATABASE_URL` (no embedded PostgreSQL) and no OTLP endpoint (no tracing). */
const without = (...names: string[][]) => STOP_ORDER.filter((n) => !names.flat().includes(n) && n !== "tracing");

/**
 * Lets a just-started server's pg-boss workers make their first fetch before it closes. Eleven
 * workers share the queue's pool of 4; one stopped while its first fetch still waits for a
 * connection never reports stopped, and pg-boss's stopping-worker watch then keeps an in-band
 * Jest run from exiting (a race in the job queue's stop, not in the start or stop order).
 */
const settle = () => new Promise((resolve) => setTimeout(resolve, 500));

/** The names of the "stopped" debug lines written since line `from`, in order. */
function stoppedSteps(logs: CapturedLogs, from = 0): string[] {
  return logs
    .records(from)
    .filter((r) => r.msg === "stopped")
    .map((r) => r.step as string);
}

describe("the component order (app/lifecycle.ts)", () => {
  test("when read backwards, then COMPONENTS is the stop order", () => {
    expect([...COMPONENTS].reverse()).toEqual(STOP_ORDER);
  });
});

describe("Lifecycle with recording components", () => {
  const order = ["a", "b", "c", "d"] as const;
  type Name = (typeof order)[number];
  let calls: string[];
  let logs: CapturedLogs;
  const component = (name: Name, failStart = false, failStop = false): Component<string, Name> => ({
    name,
    start: async () => {
      calls.push(`start ${name}`);
      if (failStart) throw new Error(`${name} would not start`);
      return `${name}-value`;
    },
    stop: async (value) => {
      calls.push(`stop ${name} (${value})`);
      if (failStop) throw new Error(`${name} would not stop`);
    },
  });
  beforeEach(() => {
    calls = [];
    logs = captureLogs("debug");
  });

  test("when components start in order and stop, then they stop in reverse with what start returned", async () => {
    const life = new Lifecycle<Name>(order, logs.logger);
    expect(await life.start(component("a"))).toBe("a-value");
    await life.start(component("b"));
    await life.start(component("d")); // "c" skipped, as an optional component is
    expect(life.names).toEqual(["a", "b", "d"]);
    await life.stop();
    expect(calls).toEqual([
      "start a",
      "start b",
      "start d",
      "stop d (d-value)",
      "stop b (b-value)",
      "stop a (a-value)",
    ]);
    expect(stoppedSteps(logs)).toEqual(["d", "b", "a"]);
    await life.stop(); // a second close finds nothing left
    expect(calls).toHaveLength(6);
  });

  test("when a start fails, then the components already started stop in reverse and the error is rethrown", async () => {
    const life = new Lifecycle<Name>(order, logs.logger);
    const started = startOrUnwind(life, async () => {
      await life.start(component("a"));
      await life.start(component("b"));
      await life.start(component("c", true));
      await life.start(component("d"));
    });
    await expect(started).rejects.toThrow("c would not start");
    expect(calls).toEqual(["start a", "start b", "start c", "stop b (b-value)", "stop a (a-value)"]);
    expect(life.names).toEqual([]);
  });

  test("when a stop fails, then it is logged and the components below it still stop", async () => {
    const life = new Lifecycle<Name>(order, logs.logger);
    await life.start(component("a"));
    await life.start(component("b", false, true));
    await life.stop();
    expect(calls).toEqual(["start a", "start b", "stop b (b-value)", "stop a (a-value)"]);
    const failed = logs.records().find((r) => r.msg === "shutdown step failed");
    expect(failed).toMatchObject({ level: 40, step: "b", err: { message: "b would not stop" } });
  });

  test("when a component starts out of order or is not in the order, then it is refused before it starts", async () => {
    const life = new Lifecycle<Name>(order, logs.logger);
    await life.start(component("b"));
    await expect(life.start(component("a"))).rejects.toThrow('component "a" started after "b"');
    await expect(life.start(component("b"))).rejects.toThrow('component "b" started after "b"');
    await expect(life.start(component("e" as Name))).rejects.toThrow('component "e" is not in the start order');
    expect(calls).toEqual(["start b"]);
    await life.stop();
  });
});

describe("a real Switchyard's shutdown", () => {
  let all: TestServer;
  let allLogs: CapturedLogs;
  let allClosed = false;
  beforeAll(async () => {
    allLogs = captureLogs("debug");
    all = await startTestServer({}, undefined, { logger: allLogs.logger });
  }, 60_000);
  afterAll(async () => {
    // Normally closed by the last test; this only matters when that one did not run.
    if (!allClosed) await all.close();
  });

  test("when an api process cannot listen (its port taken), then everything it started stops in reverse", async () => {
    const logs = captureLogs("debug");
    // graphql-ws also reports the server's listen error on the console (console.error): expected.
    const start = startTestServer({ role: "api", port: all.app.port }, all, { logger: logs.logger });
    await expect(start).rejects.toMatchObject({ code: "EADDRINUSE" });
    expect(stoppedSteps(logs)).toEqual(without(WORKERS, ["embedded PostgreSQL"]));
  }, 60_000);

  test("when a worker process closes, then it stops the workers and serves no HTTP", async () => {
    const logs = captureLogs("debug");
    const worker = await startTestServer({ role: "worker" }, all, { logger: logs.logger });
    expect(worker.app.url).toBe("");
    await settle();
    await worker.close(); // the harness's close: the shared database stays open
    expect(stoppedSteps(logs)).toEqual(without(HTTP, ["embedded PostgreSQL"]));
  }, 60_000);

  test("when an all-role process that served a request closes, then its components stop in the stop order", async () => {
    expect((await http(all.url, "GET", "/v1/health")).status).toBe(200);
    await settle();
    const from = allLogs.lines.length;
    allClosed = true;
    await all.close();
    expect(stoppedSteps(allLogs, from)).toEqual(without(["embedded PostgreSQL"]));
  }, 60_000);
});
