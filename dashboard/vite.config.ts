/**
 * Vite build of the dashboard (issue 13, item 3): `dashboard/` → `dist/dashboard/`, served by the
 * service at `/dashboard` (src/rest/dashboard.ts). Everything is bundled (graphql-ws, uPlot and
 * its CSS): the page loads nothing from outside the service.
 */
import path from "node:path";
import { fileURLToPath } from "node:url";
import { defineConfig } from "vite";

const here = path.dirname(fileURLToPath(import.meta.url));

export default defineConfig({
  root: here,
  base: "/dashboard/",
  logLevel: "warn",
  build: {
    outDir: path.join(here, "../dist/dashboard"),
    emptyOutDir: true,
    target: "es2022",
    sourcemap: false,
    chunkSizeWarningLimit: 200,
  },
});
