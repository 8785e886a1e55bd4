/**
 * Nothing sensitive in logs (issue 5, item 4): when a query fails, the error log keeps the
 * SQLSTATE and the statement's name but never its parameters (emails, names, password hashes, key
 * prefixes and hashes, prompts). Logs are captured from a real server through a pino stream while
 * the database refuses writes (a trigger raises).
 */
import { captureLogs } from "./support/log-capture.js";
import { CHAT_MODEL, type TestServer, createTestCaller, http, startTestServer } from "./support/harness.js";

let server: TestServer;
let app: TestServer["app"];
const logs = captureLogs("info");
const lines = logs.lines;

beforeAll(async () => {
  server = await startTestServer({}, undefined, { logger: logs.logger });
  app = server.app;
});
afterAll(() => server.close());

/** Makes every INSERT into `table` fail with SQLSTATE P0001 until `allow` is called. */
async function refuseInserts(table: string): Promise<() => Promise<void>> {
  await server.db(`CREATE OR REPLACE FUNCTION refuse_for_test() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN RAISE EXCEPTION 'refused by the test'; END $$`);
  await server.db(
    `CREATE TRIGGER refuse_${table} BEFORE INSERT ON ${table} FOR EACH ROW EXECUTE FUNCTION refuse_for_test()`,
  );
  return async () => {
    await server.db(`DROP TRIGGER refuse_${table} ON ${table}`);
  };
}

/** Log records at error level or above written since `from`. */
function errorsSince(from: number): Array<Record<string, any>> {
  return logs.records(from).filter((r) => r.level >= 50);
}

describe("error logs of failed queries", () => {
  it("when signup's INSERT fails, then the log names the statement and code but not the email, name or password hash", async () => {
    const from = lines.length;
    const allow = await refuseInserts("users");
    const email = "private.person.7731@example.com";
    const res = await http(app.url, "POST", "/control/v1/auth/signup", {
      body: { email, password: "correct horse battery", name: "Secret Name 7731" },
    });
    await allow();
    expect(res.status).toBe(500);
    expect(res.body).toEqual({
      status_code: 500,
      detail: "Internal server error",
      error: { message: "Internal server error", type: "server_error", code: "internal", param: null },
    });

    const logged = lines.slice(from).join("");
    const errors = errorsSince(from);
    expect(errors).toHaveLength(1);
    expect(errors[0].err).toEqual(
      expect.objectContaining({ code: "P0001", statement: "INSERT INTO users", message: "refused by the test" }),
    );
    expect(logged).not.toContain("7731");
    expect(logged).not.toContain("argon2");
    expect(logged).not.toMatch(/parameters|driverError/);
  });

  it("when an API key INSERT fails, then neither the key prefix nor its hash is logged", async () => {
    const caller = await createTestCaller(app.url);
    const from = lines.length;
    const allow = await refuseInserts("api_keys");
    const res = await http(app.url, "POST", "/control/v1/auth/api-keys", {
      token: caller.token,
      body: { name: "hidden-key-name-5521" },
    });
    await allow();
    expect(res.status).toBe(500);

    const logged = lines.slice(from).join("");
    expect(errorsSince(from)[0].err).toEqual(
      expect.objectContaining({ code: "P0001", statement: "INSERT INTO api_keys" }),
    );
    expect(logged).not.toMatch(/sk_[0-9A-Za-z]{9}/);
    expect(logged).not.toContain("5521");
    expect(logged).not.toMatch(/Buffer|"data":\[/);
  });

  it("when a query fails on a bad parameter, then the value the message quotes is blanked", async () => {
    const from = lines.length;
    await app.dataSource.query("SELECT $1::uuid", ["secret-token-8812"]).catch((err) => app.logger.error({ err }, "x"));
    const [record] = errorsSince(from);
    expect(record.err).toEqual(expect.objectContaining({ code: "22P02", statement: "SELECT" }));
    expect(record.err.message).toBe('invalid input syntax for type uuid: "…"');
    expect(lines.slice(from).join("")).not.toContain("8812");
  });

  it("when the metering flush fails, then its logs do not carry the prompt", async () => {
    const caller = await createTestCaller(app.url);
    const from = lines.length;
    const allow = await refuseInserts("activity");
    const res = await http(app.url, "POST", "/v1/chat/completions", {
      token: caller.key,
      body: { model: CHAT_MODEL, max_tokens: 2, messages: [{ role: "user", content: "my secret prompt 6604" }] },
    });
    await allow();
    expect(res.status).toBeGreaterThanOrEqual(500);

    const logged = lines.slice(from).join("");
    expect(logged).toContain("metering flush failed");
    expect(logged).not.toContain("6604");
    expect(logged).not.toContain(caller.keyPrefix);
  });
});
