/** Jest global teardown: stops (and deletes) the embedded PostgreSQL of global setup. */
export default async function globalTeardown() {
  await globalThis.__switchyardPg?.stop();
}
