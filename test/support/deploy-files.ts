/**
 * Readers of the deployment files (issue 31, item 5), shared by test/deploy-files.test.ts (their
 * shape) and test/topology.test.ts (which runs compose.yaml's services as processes):
 * compose.yaml with Compose's variable interpolation, the Dockerfile's stages, and the Kubernetes
 * manifests under deploy/k8s/.
 */
import { readFileSync, readdirSync } from "node:fs";
import path from "node:path";
import { parse, parseAllDocuments } from "yaml";
import { packageRoot } from "../../src/config/config.js";

/** A service of compose.yaml, after the merge keys (`<<: *anchor`) are applied. */
export interface ComposeService {
  image?: string;
  build?: { context?: string; target?: string };
  command?: string[] | string;
  environment?: Record<string, string | number | boolean | null> | string[];
  volumes?: string[];
  profiles?: string[];
  depends_on?: Record<string, { condition?: string }> | string[];
  healthcheck?: { test?: string[] | string };
  [key: string]: unknown;
}

/** compose.yaml (or `file`), parsed with YAML 1.1 merge keys as Compose reads it; nothing interpolated. */
export function readCompose(file = "compose.yaml"): { services: Record<string, ComposeService>; raw: string } {
  const raw = readFileSync(path.join(packageRoot, file), "utf8");
  const doc = parse(raw, { merge: true }) as { services: Record<string, ComposeService> };
  return { services: doc.services, raw };
}

/** Thrown for `${VAR:?message}` with VAR unset or empty (as Compose refuses to start). */
export class MissingVariableError extends Error {}

/**
 * Compose's interpolation of one string: `$$` → `$`, `$VAR`, `${VAR}`, `${VAR:-default}`,
 * `${VAR-default}`, `${VAR:?error}`, `${VAR?error}`, `${VAR:+other}`, `${VAR+other}`, with `vars`
 * as the `.env` file and the shell.
 * @throws MissingVariableError for a required variable that `vars` lacks.
 */
export function interpolate(value: string, vars: Record<string, string | undefined>): string {
  return value.replace(
    /\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)/g,
    (whole: string, braced?: string, op?: string, arg?: string, bare?: string) => {
      if (whole === "$$") return "$";
      const name = (braced ?? bare)!;
      const v = vars[name];
      const unset = v === undefined;
      const empty = unset || v === "";
      switch (op) {
        case ":-":
          return empty ? arg! : v!;
        case "-":
          return unset ? arg! : v!;
        case ":?":
        case "?":
          if (op === ":?" ? empty : unset) throw new MissingVariableError(`${name}: ${arg}`);
          return v!;
        case ":+":
          return empty ? "" : arg!;
        case "+":
          return unset ? "" : arg!;
        default:
          return v ?? "";
      }
    },
  );
}

/** The names of the variables a compose value refers to (`${VAR…}` and `$VAR`, not `$$`). */
export function referencedVariables(value: string): string[] {
  const names: string[] = [];
  for (const m of value.matchAll(/\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)|\$([A-Za-z_][A-Za-z0-9_]*)/g)) {
    if (m[0] !== "$$") names.push(m[1] ?? m[2]);
  }
  return names;
}

/** A service's `environment` as a map, each value interpolated with `vars` (Compose's list form too). */
export function serviceEnvironment(
  service: ComposeService,
  vars: Record<string, string | undefined>,
): Record<string, string> {
  const env: Record<string, string> = {};
  const entries: Array<[string, unknown]> = Array.isArray(service.environment)
    ? service.environment.map((line) => {
        const at = line.indexOf("=");
        return at < 0 ? [line, vars[line]] : [line.slice(0, at), line.slice(at + 1)];
      })
    : Object.entries(service.environment ?? {});
  for (const [name, value] of entries) {
    if (value === null || value === undefined) continue;
    env[name] = interpolate(String(value), vars);
  }
  return env;
}

/** A service's command as an argument list (Compose's string form split on spaces). */
export function serviceCommand(service: ComposeService): string[] {
  const command = service.command ?? [];
  return Array.isArray(command) ? command : command.split(/\s+/).filter(Boolean);
}

/** The TypeScript source a built script of the image runs: `dist/x/y.js` → `src/x/y.ts`. */
export function sourceOfBuiltScript(script: string): string {
  const m = /^dist\/(.+)\.js$/.exec(script);
  if (!m) throw new Error(`not a script of the build: ${script}`);
  return `src/${m[1]}.ts`;
}

/**
 * A service's mounts: the path inside the container → the host path (interpolated, resolved
 * against the repository root where relative) or a named volume's name.
 */
export function serviceMounts(
  service: ComposeService,
  vars: Record<string, string | undefined>,
): Map<string, { source: string; named: boolean }> {
  const mounts = new Map<string, { source: string; named: boolean }>();
  for (const spec of service.volumes ?? []) {
    const [source, target] = interpolate(spec, vars).split(":");
    const named = !/^[./~]/.test(source) && !path.isAbsolute(source);
    mounts.set(target, { source: named ? source : path.resolve(packageRoot, source), named });
  }
  return mounts;
}

/** One stage of the Dockerfile: its base, name and instructions (continuation lines joined). */
export interface DockerStage {
  from: string;
  name?: string;
  instructions: Array<{ op: string; args: string }>;
}

/** The Dockerfile's stages in order (the last one is what `docker build` builds by default). */
export function readDockerfile(file = "Dockerfile"): { stages: DockerStage[]; args: Record<string, string> } {
  const text = readFileSync(path.join(packageRoot, file), "utf8");
  const lines = text
    .split("\n")
    .filter((l) => !/^\s*#/.test(l))
    .join("\n")
    .replace(/\\\n/g, " ")
    .split("\n")
    .map((l) => l.trim())
    .filter(Boolean);
  const stages: DockerStage[] = [];
  const args: Record<string, string> = {};
  for (const line of lines) {
    const [, op, rest] = /^(\S+)\s*(.*)$/.exec(line)!;
    const upper = op.toUpperCase();
    if (upper === "FROM") {
      const m = /^(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?$/i.exec(rest)!;
      stages.push({ from: m[1], name: m[2], instructions: [] });
    } else if (stages.length === 0 && upper === "ARG") {
      const [name, value] = rest.split("=");
      args[name] = value ?? "";
    } else {
      stages.at(-1)?.instructions.push({ op: upper, args: rest.replace(/\s+/g, " ") });
    }
  }
  return { stages, args };
}

/** The `ENV` settings of a stage (`ENV A=1 B=2` form), in order. */
export function stageEnv(stage: DockerStage): Record<string, string> {
  const env: Record<string, string> = {};
  for (const { op, args } of stage.instructions) {
    if (op !== "ENV") continue;
    for (const pair of args.split(" ")) {
      const at = pair.indexOf("=");
      if (at > 0) env[pair.slice(0, at)] = pair.slice(at + 1);
    }
  }
  return env;
}

/** A Kubernetes object of deploy/k8s/. */
export type K8sObject = { apiVersion: string; kind: string; metadata: { name: string }; [key: string]: any };

/** Every object of every YAML file in deploy/k8s/ with the file it came from. */
export function readK8s(): Array<{ file: string; object: K8sObject }> {
  const dir = path.join(packageRoot, "deploy/k8s");
  const out: Array<{ file: string; object: K8sObject }> = [];
  for (const file of readdirSync(dir).filter((f) => /\.ya?ml$/.test(f))) {
    for (const doc of parseAllDocuments(readFileSync(path.join(dir, file), "utf8"))) {
      if (doc.errors.length > 0) throw new Error(`${file}: ${doc.errors.map((e) => e.message).join("; ")}`);
      const object = doc.toJS() as K8sObject | null;
      // A Kustomization has no metadata: its name is "".
      if (object) out.push({ file, object: { ...object, metadata: object.metadata ?? { name: "" } } });
    }
  }
  return out;
}
