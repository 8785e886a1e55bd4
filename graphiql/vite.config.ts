/**
 * Vite build of GraphiQL (issue 27, item 7): `graphiql/` → `dist/graphiql/`, served by the service
 * at `GET /graphql` for browsers (src/rest/graphiql.ts) with its files under `/graphiql/assets/`.
 * Everything is bundled from npm packages (GraphiQL, React, Monaco and its workers, the fonts its
 * CSS inlines): the page loads nothing from outside the service, unlike Apollo's landing page,
 * which fetched its code from a CDN and stayed blank offline.
 *
 * GraphiQL 5 (the maintained line) rather than 3/4 (CodeMirror 5): its Monaco editors run in web
 * workers, which `graphiql/setup-workers/vite` declares as Vite `?worker` imports, so they build
 * into hashed same-origin files with no extra configuration. The cost is size: Monaco and its
 * workers are most of the ~6.5 MB of JavaScript (1.8 MB gzipped), loaded only by this page (the
 * dashboard's bundle is separate).
 */
import path from "node:path";
import { fileURLToPath } from "node:url";
import { defineConfig } from "vite";

const here = path.dirname(fileURLToPath(import.meta.url));

export default defineConfig({
  root: here,
  base: "/graphiql/",
  logLevel: "warn",
  build: {
    outDir: path.join(here, "../dist/graphiql"),
    emptyOutDir: true,
    target: "es2022",
    sourcemap: false,
    // Monaco's editor core and its language workers are large by nature (see above).
    chunkSizeWarningLimit: 5000,
    rolldownOptions: {
      // framer-motion (GraphiQL's animations) marks modules "use client" for React Server
      // Components, which mean nothing in a browser bundle; every other warning is shown.
      onwarn(warning, warn) {
        if (warning.code !== "MODULE_LEVEL_DIRECTIVE") warn(warning);
      },
    },
  },
});
