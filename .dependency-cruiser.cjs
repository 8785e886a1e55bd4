/**
 * The one-way imports of DESIGN §1, checked by `npm run check` (issue 6, item 8):
 * rest and resolvers → services → inference, entities, db; config and src/shared (error codes,
 * money) below everything; jobs call services, never HTTP handlers; no cycles.
 */
const layer = (name, mayNotImport, comment) => ({
  name,
  comment,
  severity: "error",
  from: { path: `^src/${name === "entities-db" ? "(entities|db)" : name}/` },
  to: { path: `^src/(${mayNotImport.join("|")})/` },
});

const DOMAINS = require("./.dependency-cruiser.domains.cjs");

const domainOrder = DOMAINS.slice(0, -1).map((domain, i) => ({
  name: `domain-order-${domain}`,
  comment: `services/${domain} sits below ${DOMAINS.slice(i + 1).join(", ")}`,
  severity: "error",
  from: { path: `^src/services/${domain}/` },
  to: { path: `^src/services/(${DOMAINS.slice(i + 1).join("|")})/` },
}));

module.exports = {
  forbidden: [
    ...domainOrder,
    {
      name: "services-in-domains",
      severity: "error",
      comment: "every service file sits in a domain folder (DOMAINS)",
      from: { path: "^src/" },
      to: { path: `^src/services/(?!(${DOMAINS.join("|")})/)` },
    },
    {
      name: "no-circular",
      severity: "error",
      comment: "no import cycles",
      from: { path: "^src/" },
      to: { circular: true },
    },
    {
      name: "shared",
      comment: "shared sits below everything: it imports nothing else of src/, loose files (logging, main) included",
      severity: "error",
      from: { path: "^src/shared/" },
      to: { path: "^src/", pathNot: "^src/shared/" },
    },
    layer(
      "config",
      ["entities", "db", "inference", "services", "resolvers", "schema", "rest", "jobs"],
      "config sits below everything but shared",
    ),
    layer(
      "entities-db",
      ["inference", "services", "resolvers", "schema", "rest", "jobs"],
      "persistence knows no rules or transports",
    ),
    layer(
      "inference",
      ["entities", "db", "services", "resolvers", "schema", "rest", "jobs"],
      "engines know no rules or transports",
    ),
    layer("services", ["resolvers", "schema", "rest", "jobs"], "services are called, they call no transport"),
    {
      name: "services-behind-engine-interface",
      severity: "error",
      comment: "services see only the engine interface and model artifacts",
      from: { path: "^src/services/" },
      to: { path: "^src/inference/engines/" },
    },
    layer("jobs", ["resolvers", "schema", "rest"], "jobs call services, never HTTP handlers"),
    {
      name: "rest-no-persistence",
      severity: "error",
      comment: "REST reads records through the services, never entities or the database",
      from: { path: "^src/rest/" },
      to: { path: "^src/(entities|db)/" },
    },
    {
      name: "transports-apart",
      severity: "error",
      comment: "GraphQL resolvers and schema never import the REST layer",
      from: { path: "^src/(resolvers|schema)/" },
      to: { path: "^src/rest/" },
    },
    {
      name: "schema-without-resolvers",
      severity: "error",
      comment:
        "the schema folder holds GraphQL types; the resolver list comes from resolvers/index.ts through the composition root (issue 25, item 4)",
      from: { path: "^src/schema/" },
      to: { path: "^src/resolvers/" },
    },
    {
      name: "composition-root",
      severity: "error",
      comment:
        "only the entry points (main.ts, worker.ts, scripts, the server.ts re-export) import the composition root: src/app/ and src/server.ts",
      from: { path: "^src/", pathNot: "^src/(main\\.ts|worker\\.ts|server\\.ts|scripts/|app/)" },
      to: { path: "^src/(app/|server\\.ts$)" },
    },
    {
      name: "composition-root-below-entry-points",
      severity: "error",
      comment: "src/app/ files import each other, never an entry point or the server.ts re-export",
      from: { path: "^src/app/" },
      to: { path: "^src/((main|worker|server)\\.ts$|scripts/)" },
    },
  ],
  options: {
    doNotFollow: { path: "node_modules" },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: "tsconfig.json" },
  },
};
