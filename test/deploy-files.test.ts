/**
 * The deployment files (issue 31, item 5): Dockerfile, compose.yaml (with deploy/compose.gpu.yaml
 * and deploy/compose.env.example) and the Kubernetes manifests of deploy/k8s/. No container
 * runtime runs here, so what can be checked without one is: every SWITCHYARD_* and DATABASE_*
 * name they set is a real setting, and each Switchyard service's whole environment is one the
 * configuration accepts; the probes and health checks ask paths the service serves; the images
 * run as an unprivileged user, the default image carries node-llama-cpp's CPU build only, and
 * what the Dockerfile copies exists. test/topology.test.ts runs compose.yaml's services as
 * processes.
 */
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { type Config, loadConfig, packageRoot } from "../src/config/config.js";
import { ENV_NAMES } from "../src/config/env-names.js";
import { buildOpenApiDocument } from "../src/rest/openapi.js";
import {
  type ComposeService,
  type K8sObject,
  interpolate,
  readCompose,
  readDockerfile,
  readK8s,
  referencedVariables,
  serviceCommand,
  serviceEnvironment,
  sourceOfBuiltScript,
  stageEnv,
} from "./support/deploy-files.js";

/** The names the configuration reads (src/config/env-names.ts), and the few read beside it. */
const SETTINGS = new Set<string>([
  ...Object.values(ENV_NAMES),
  "OTEL_EXPORTER_OTLP_ENDPOINT",
  "OTEL_EXPORTER_OTLP_PROTOCOL",
  "SWITCHYARD_CONFIG",
  "SWITCHYARD_ADMIN_PASSWORD",
]);
/** Environment of the images that is not Switchyard's: Node's, node-llama-cpp's build, NVIDIA's runtime. */
const PLATFORM_ENV = new Set([
  "NODE_ENV",
  "NODE_LLAMA_CPP_SKIP_DOWNLOAD",
  "NVIDIA_VISIBLE_DEVICES",
  "NVIDIA_DRIVER_CAPABILITIES",
]);

/** The names of `names` that are Switchyard's kind (SWITCHYARD_*, DATABASE_*) but no setting. */
function unknownSettings(names: Iterable<string>): string[] {
  return [...names].filter((n) => /^(SWITCHYARD|DATABASE)_/.test(n) && !SETTINGS.has(n));
}

/** The names of a Switchyard process's environment that nothing reads. */
function unreadNames(names: Iterable<string>): string[] {
  return [...names].filter((n) => !SETTINGS.has(n) && !PLATFORM_ENV.has(n));
}

/** What a filled-in `.env` gives compose.yaml (deploy/compose.env.example, filled in). */
const DOT_ENV: Record<string, string> = {
  POSTGRES_PASSWORD: "a-password-for-the-checks",
  SWITCHYARD_JWT_SECRET: "a-jwt-secret-of-more-than-32-characters",
  SWITCHYARD_ENGINE_TOKEN: "an-engine-token-of-more-than-32-characters",
  SWITCHYARD_PUBLIC_URL: "https://switchyard.example.com",
  SWITCHYARD_PAYMENT_PROVIDER: "stripe",
  SWITCHYARD_STRIPE_SECRET_KEY: "sk_test_checks",
};

const compose = readCompose();
const dockerfile = readDockerfile();
const k8s = readK8s();
const switchyardServices = Object.entries(compose.services).filter(([, s]) => s.image?.startsWith("switchyard:"));

/** A stage of the Dockerfile by name. */
function stage(name: string) {
  const found = dockerfile.stages.find((s) => s.name === name);
  if (!found) throw new Error(`no stage ${name}`);
  return found;
}

/**
 * Loads the configuration a process with exactly `env` gets (the image's ENV under it); a JWT
 * secret where `env` has none, so that nothing is written to the data folder.
 */
function configOf(env: Record<string, string>): Config {
  return loadConfig({ ...stageEnv(stage("cpu")), SWITCHYARD_JWT_SECRET: DOT_ENV.SWITCHYARD_JWT_SECRET, ...env });
}

describe("compose.yaml", () => {
  test("it has the services a machine runs, vLLM only under its profile", () => {
    expect(Object.keys(compose.services).sort()).toEqual(
      ["api", "engine", "migrate", "pgbouncer", "postgres", "vllm", "worker"].sort(),
    );
    expect(compose.services.vllm.profiles).toEqual(["vllm"]);
    for (const [name, s] of Object.entries(compose.services)) {
      if (name !== "vllm") expect([name, s.profiles]).toEqual([name, undefined]);
    }
  });

  test("every SWITCHYARD_* and DATABASE_* name it, the GPU override and the .env example use is a real setting", () => {
    const names = new Set<string>();
    for (const file of ["compose.yaml", "deploy/compose.gpu.yaml"]) {
      for (const s of Object.values(readCompose(file).services)) {
        for (const name of Object.keys(serviceEnvironment(s, new Proxy({}, { get: () => "x" })))) names.add(name);
      }
      for (const name of referencedVariables(readFileSync(path.join(packageRoot, file), "utf8"))) names.add(name);
    }
    const example = readFileSync(path.join(packageRoot, "deploy/compose.env.example"), "utf8");
    for (const m of example.matchAll(/^#?\s*([A-Z][A-Z0-9_]*)=/gm)) names.add(m[1]);
    expect(names.size).toBeGreaterThan(20);
    expect(unknownSettings(names)).toEqual([]);
  });

  test("each Switchyard service's environment is read whole, and accepted by the configuration", () => {
    expect(switchyardServices.map(([n]) => n).sort()).toEqual(["api", "engine", "migrate", "worker"]);
    for (const [name, service] of switchyardServices) {
      const env = serviceEnvironment(service, DOT_ENV);
      expect([name, unreadNames(Object.keys(env))]).toEqual([name, []]);
      const config = configOf(env);
      expect([name, config.dataDir]).toEqual([name, "/var/lib/switchyard"]);
    }
    // The roles: one engine, an API supervisor of two processes calling it, a worker calling it.
    const roles = Object.fromEntries(
      switchyardServices.map(([name, s]) => [name, configOf(serviceEnvironment(s, DOT_ENV))]),
    );
    expect(roles.engine).toMatchObject({ role: "engine", host: "0.0.0.0", port: 8090 });
    expect(roles.api).toMatchObject({ role: "api", apiProcesses: 2, engineUrl: "http://engine:8090", host: "0.0.0.0" });
    expect(roles.worker).toMatchObject({ role: "worker", engineUrl: "http://engine:8090" });
    for (const name of ["api", "worker", "migrate"]) {
      expect(new URL(roles[name].databaseUrl!).host).toBe("pgbouncer:6432");
      expect(new URL(roles[name].databaseDirectUrl!).host).toBe("postgres:5432");
    }
    expect(roles.api.engineToken).toBe(roles.engine.engineToken);
  });

  test("a missing secret stops it, as Compose does", () => {
    const { POSTGRES_PASSWORD: _, ...withoutPassword } = DOT_ENV;
    expect(() => serviceEnvironment(compose.services.api, withoutPassword)).toThrow(/POSTGRES_PASSWORD/);
  });

  test("the commands run scripts the build has, and the health checks ask paths the service serves", () => {
    for (const [name, service] of switchyardServices) {
      const [node, script] = serviceCommand(service);
      expect([name, node]).toEqual([name, "node"]);
      expect([name, existsSync(path.join(packageRoot, sourceOfBuiltScript(script)))]).toEqual([name, true]);
    }
    const api = JSON.stringify(compose.services.api.healthcheck?.test);
    expect(api).toContain("http://127.0.0.1:8080/v1/health/ready");
    expect(servedGetPaths()).toContain("/v1/health/ready");
  });

  test("the engine's data, models and catalog are mounted where its settings say", () => {
    for (const [name, service] of switchyardServices) {
      const targets = (service.volumes ?? []).map((v) => interpolate(v, DOT_ENV).split(":")[1]);
      const config = configOf(serviceEnvironment(service, DOT_ENV));
      expect([name, targets]).toEqual([
        name,
        expect.arrayContaining([config.dataDir, config.modelsDir, config.catalogPath]),
      ]);
    }
    // The default catalog mounted is the repository's own.
    const catalog = (compose.services.api.volumes ?? []).find((v) => v.includes("catalog.json"))!;
    expect(existsSync(path.join(packageRoot, interpolate(catalog, {}).split(":")[0]))).toBe(true);
  });
});

describe("Dockerfile", () => {
  const last = dockerfile.stages.at(-1)!;

  test("the default image is the CPU one, and it and the GPU one run as an unprivileged user", () => {
    expect(last.name).toBe("cpu");
    for (const s of [last, stage("cuda"), stage("pgbouncer")]) {
      const user = s.instructions.filter((i) => i.op === "USER").at(-1)?.args;
      expect([s.name, user]).toEqual([s.name, expect.stringMatching(/^[1-9]\d{3,}(:[1-9]\d{3,})?$/)]);
    }
    expect(stage("cuda").instructions.find((i) => i.op === "CMD")?.args).toBe('["node", "dist/main.js"]');
    expect(last.instructions.find((i) => i.op === "CMD")?.args).toBe('["node", "dist/main.js"]');
  });

  test("the CPU image's node-llama-cpp keeps its CPU build only; the GPU builds go to the cuda image", () => {
    const copiesModulesFrom = (s: ReturnType<typeof stage>) =>
      s.instructions.find((i) => i.op === "COPY" && i.args.includes("node_modules"))?.args;
    expect(copiesModulesFrom(last)).toMatch(/^--from=deps-cpu /);
    expect(copiesModulesFrom(stage("cuda"))).toMatch(/^--from=deps-cuda /);
    const cpuPrune = stage("deps-cpu")
      .instructions.map((i) => i.args)
      .join("\n");
    expect(cpuPrune).toMatch(/keep="linux-\$\(node -p process\.arch\)"/);
    expect(cpuPrune).toContain("rm -rf");
    expect(stage("deps").instructions.some((i) => i.op === "RUN" && i.args.includes("--omit=dev"))).toBe(true);
  });

  test("its ENV names are real settings, and what it copies from the checkout exists and is not ignored", () => {
    const names = dockerfile.stages.flatMap((s) => Object.keys(stageEnv(s)));
    expect(unknownSettings(names)).toEqual([]);
    expect(unreadNames(names)).toEqual([]);
    expect(configOf({})).toMatchObject({ dataDir: "/var/lib/switchyard", gpu: "off" });
    const ignored = readFileSync(path.join(packageRoot, ".dockerignore"), "utf8")
      .split("\n")
      .map((l) => l.trim())
      .filter((l) => l && !l.startsWith("#"));
    const sources = dockerfile.stages
      .flatMap((s) => s.instructions)
      .filter((i) => i.op === "COPY" && !i.args.startsWith("--from="))
      .flatMap((i) => i.args.split(" ").slice(0, -1));
    expect(sources.length).toBeGreaterThan(8);
    for (const source of sources) {
      expect([source, existsSync(path.join(packageRoot, source))]).toEqual([source, true]);
      expect([source, ignored.filter((p) => source === p || source.startsWith(`${p}/`))]).toEqual([source, []]);
    }
  });
});

/** The GET paths of the OpenAPI document (the routes the service serves, test/openapi.test.ts). */
function servedGetPaths(): string[] {
  const doc = buildOpenApiDocument() as { paths: Record<string, Record<string, unknown>> };
  return Object.entries(doc.paths)
    .filter(([, ops]) => "get" in ops)
    .map(([p]) => p);
}

/** The Switchyard containers of deploy/k8s/ (image `switchyard`) with the object holding them. */
function switchyardContainers(): Array<{ object: K8sObject; pod: any; container: any }> {
  return k8s.flatMap(({ object }) => {
    const pod = object.spec?.template?.spec;
    return (pod?.containers ?? [])
      .filter((c: any) => c.image === "switchyard")
      .map((container: any) => ({ object, pod, container }));
  });
}

/** The environment a container gets, secrets filled with `secrets`' values by key. */
function containerEnv(container: any, secrets: Record<string, string>): Record<string, string> {
  const env: Record<string, string> = {};
  for (const from of container.envFrom ?? []) {
    const map = k8s.find(
      ({ object }) => object.kind === "ConfigMap" && object.metadata.name === from.configMapRef?.name,
    );
    if (!map) throw new Error(`no ConfigMap ${from.configMapRef?.name}`);
    Object.assign(env, map.object.data);
  }
  for (const e of container.env ?? []) {
    const key = e.valueFrom?.secretKeyRef?.key as string | undefined;
    env[e.name] = key !== undefined ? (secrets[key] ?? "") : String(e.value);
  }
  return env;
}

describe("deploy/k8s", () => {
  const secrets: Record<string, string> = {
    "database-url": "postgres://switchyard:pw@switchyard-pgbouncer:6432/switchyard",
    "database-direct-url": "postgres://switchyard:pw@postgres:5432/switchyard",
    "jwt-secret": "a-jwt-secret-of-more-than-32-characters",
    "stripe-secret-key": "sk_test_checks",
  };

  test("API and worker Deployments, a Service, a migration Job, PgBouncer; the kustomization lists them", () => {
    const kinds = k8s.map(({ object }) => `${object.kind}/${object.metadata.name}`);
    expect(kinds).toEqual(
      expect.arrayContaining([
        "Deployment/switchyard-api",
        "Service/switchyard-api",
        "Deployment/switchyard-worker",
        "Job/switchyard-migrate",
        "Deployment/switchyard-pgbouncer",
        "Service/switchyard-pgbouncer",
        "ConfigMap/switchyard",
        "Secret/switchyard",
      ]),
    );
    const kustomization = k8s.find(({ object }) => object.kind === "Kustomization")!.object;
    for (const file of kustomization.resources as string[]) {
      expect([file, existsSync(path.join(packageRoot, "deploy/k8s", file))]).toEqual([file, true]);
    }
    // The example Secret is one to copy, not one to apply.
    expect(kustomization.resources).not.toContain("secret.example.yaml");
  });

  test("every name the containers and the ConfigMap set is a real setting, and each environment is accepted", () => {
    const containers = switchyardContainers();
    expect(containers.map((c) => c.object.metadata.name).sort()).toEqual([
      "switchyard-api",
      "switchyard-migrate",
      "switchyard-worker",
    ]);
    for (const { object, container } of containers) {
      const env = containerEnv(container, secrets);
      expect([object.metadata.name, unknownSettings(Object.keys(env)), unreadNames(Object.keys(env))]).toEqual([
        object.metadata.name,
        [],
        [],
      ]);
      configOf(env);
      // Every secret the container reads is one the example Secret has.
      const example = k8s.find(({ object: o }) => o.kind === "Secret")!.object.stringData;
      for (const e of container.env ?? []) {
        const ref = e.valueFrom?.secretKeyRef;
        if (ref) expect([e.name, ref.name, ref.key in example]).toEqual([e.name, "switchyard", true]);
      }
    }
    const api = containers.find((c) => c.object.metadata.name === "switchyard-api")!;
    expect(configOf(containerEnv(api.container, secrets))).toMatchObject({ role: "api", apiProcesses: 2, port: 8080 });
    const worker = containers.find((c) => c.object.metadata.name === "switchyard-worker")!;
    expect(configOf(containerEnv(worker.container, secrets)).role).toBe("worker");
    const [node, script, ...args] = containers.find((c) => c.object.kind === "Job")!.container.command;
    expect([node, sourceOfBuiltScript(script), args]).toEqual(["node", "src/scripts/admin-cli.ts", ["migrate"]]);
  });

  test("the API's probes: liveness on /v1/health, readiness on /v1/health/ready, on its HTTP port", () => {
    const { container } = switchyardContainers().find((c) => c.object.metadata.name === "switchyard-api")!;
    expect(container.livenessProbe.httpGet.path).toBe("/v1/health");
    expect(container.readinessProbe.httpGet.path).toBe("/v1/health/ready");
    expect(container.startupProbe.httpGet.path).toBe("/v1/health");
    const served = servedGetPaths();
    const port = container.ports.find((p: any) => p.name === "http").containerPort;
    expect(String(port)).toBe(containerEnv(container, secrets).PORT);
    for (const probe of [container.livenessProbe, container.readinessProbe, container.startupProbe]) {
      expect(served).toContain(probe.httpGet.path);
      expect(probe.httpGet.port).toBe("http");
    }
    const service = k8s.find(({ object }) => object.kind === "Service" && object.metadata.name === "switchyard-api")!;
    expect(service.object.spec.ports[0].targetPort).toBe("http");
    expect(service.object.spec.selector).toEqual(
      k8s.find(({ object }) => object.metadata.name === "switchyard-api" && object.kind === "Deployment")!.object.spec
        .selector.matchLabels,
    );
  });

  test("every pod runs as a non-root user, Switchyard's as the image's user", () => {
    const imageUser = dockerfile.stages
      .at(-1)!
      .instructions.filter((i) => i.op === "USER")
      .at(-1)!.args;
    for (const { object } of k8s) {
      const pod = object.spec?.template?.spec;
      if (!pod) continue;
      expect([object.metadata.name, pod.securityContext?.runAsNonRoot]).toEqual([object.metadata.name, true]);
      for (const c of pod.containers) {
        expect([c.name, c.securityContext?.allowPrivilegeEscalation]).toEqual([c.name, false]);
      }
    }
    for (const { object, pod } of switchyardContainers()) {
      expect([object.metadata.name, `${pod.securityContext.runAsUser}:${pod.securityContext.runAsGroup}`]).toEqual([
        object.metadata.name,
        imageUser,
      ]);
    }
  });
});

describe("the checks themselves", () => {
  test("a misspelt setting, an unread name and a probe on a path nobody serves are caught", () => {
    expect(unknownSettings(["SWITCHYARD_API_PROCESS", "DATABASE_DIRECT", "SWITCHYARD_ROLE", "PATH"])).toEqual([
      "SWITCHYARD_API_PROCESS",
      "DATABASE_DIRECT",
    ]);
    expect(unreadNames(["HOST", "PORTS", "NODE_ENV"])).toEqual(["PORTS"]);
    expect(servedGetPaths()).not.toContain("/v1/healthz");
    expect(() => configOf({ SWITCHYARD_API_PROCESSES: "two" })).toThrow(/SWITCHYARD_API_PROCESSES/);
    const service: ComposeService = { environment: { A: "${B:?B is needed}", C: "$${D}", E: "${F:-f}" } };
    expect(() => serviceEnvironment(service, {})).toThrow(/B is needed/);
    expect(serviceEnvironment(service, { B: "b" })).toEqual({ A: "b", C: "${D}", E: "f" });
  });
});
