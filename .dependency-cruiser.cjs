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

module.exports = {
  forbidden: [
    {
      name: "no-circular",
      severity: "error",
      comment: "no import cycles",
      from: { path: "^src/" },
      to: { circular: true },
    },
    layer(
      "shared",
      ["config", "entities", "db", "inference", "services", "resolvers", "schema", "rest", "jobs"],
      "shared sits below everything",
    ),
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
    layer("jobs", ["resolvers", "schema", "rest"], "jobs call services, never HTTP handlers"),
    {
      name: "transports-apart",
      severity: "error",
      comment: "GraphQL resolvers and schema never import the REST layer",
      from: { path: "^src/(resolvers|schema)/" },
      to: { path: "^src/rest/" },
    },
    {
      name: "composition-root",
      severity: "error",
      comment: "only the entry points import the composition root",
      from: { path: "^src/", pathNot: "^src/(main|scripts/)" },
      to: { path: "^src/server\\.ts$" },
    },
  ],
  options: {
    doNotFollow: { path: "node_modules" },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: "tsconfig.json" },
  },
};
