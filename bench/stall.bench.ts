/**
 * Benchmark: does one heavy request stall everyone else? (issue 5, item 1). Starts Switchyard as
 * its own process (`node dist-bench/src/main.js`, embedded PostgreSQL in a temp folder), then, for
 * each heavy request below, one at a time, sends it while a prober times `GET /v1/health` back to
 * back, and prints the worst and median probe wait with the ratio to the idle baseline measured
 * in the same run. Target: worst ≤ 250 ms for every row.
 *
 *   npm run bench:stall
 *
 * Model files from SWITCHYARD_MODELS_DIR (default ../shared/models).
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Worker } from "node:worker_threads";
import WebSocket from "ws";
import { printJson } from "./report.js";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");
const MIB = 1024 * 1024;

interface Heavy {
  name: string;
  run: (base: string, key: string) => Promise<string>;
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 4 });

/** One HTTP request with a raw body; resolves with the status code. */
function send(base: string, method: string, pathName: string, body?: string, key?: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      base + pathName,
      {
        method,
        agent: body && body.length > MIB ? undefined : agent,
        headers: {
          "content-type": "application/json",
          ...(key ? { authorization: `Bearer ${key}` } : {}),
          ...(body ? { "content-length": Buffer.byteLength(body) } : {}),
        },
      },
      (res) => {
        res.resume();
        res.on("end", () => resolve(res.statusCode ?? 0));
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}

const chat = (content: string) =>
  JSON.stringify({ model: "tinystories-260k", max_tokens: 4, messages: [{ role: "user", content }] });

const heavies: Heavy[] = [
  {
    name: "graphql-ws frame, 60 MiB, no credentials",
    run: (base) =>
      new Promise((resolve) => {
        const ws = new WebSocket(base.replace("http", "ws") + "/graphql", "graphql-transport-ws");
        ws.on("open", () => ws.send("x".repeat(60 * MIB)));
        ws.on("close", (code) => resolve(`closed ${code}`));
        ws.on("error", (err) => resolve(`error ${err.message.slice(0, 30)}`));
      }),
  },
  {
    name: "GraphQL query, 700k aliases, no credentials",
    run: async (base) => {
      const fields = Array.from({ length: 700_000 }, (_, i) => `a${i}:__typename`).join(" ");
      return String(await send(base, "POST", "/graphql", JSON.stringify({ query: `{${fields}}` })));
    },
  },
  {
    name: "GraphQL query, depth 5,000, no credentials",
    run: async (base) => {
      const query = "{" + "me{".repeat(5000) + "id" + "}".repeat(5001);
      return String(await send(base, "POST", "/graphql", JSON.stringify({ query })));
    },
  },
  {
    name: "chat completion, 15 MiB prompt",
    run: async (base, key) =>
      String(await send(base, "POST", "/v1/chat/completions", chat("Once upon a time ".repeat((15 * MIB) / 17)), key)),
  },
  {
    name: "chat completion, 7 MiB prompt (under the body limit)",
    run: async (base, key) =>
      String(await send(base, "POST", "/v1/chat/completions", chat("Once upon a time ".repeat((7 * MIB) / 17)), key)),
  },
  {
    name: "embeddings, one 7 MiB input (under the body limit)",
    run: async (base, key) =>
      String(
        await send(
          base,
          "POST",
          "/v1/embeddings",
          JSON.stringify({ model: "tinystories-260k-embed", input: "a red ball ".repeat((7 * MIB) / 11) }),
          key,
        ),
      ),
  },
  {
    name: "embeddings, one 15 MiB input",
    run: async (base, key) =>
      String(
        await send(
          base,
          "POST",
          "/v1/embeddings",
          JSON.stringify({ model: "tinystories-260k-embed", input: "a red ball ".repeat((15 * MIB) / 11) }),
          key,
        ),
      ),
  },
  {
    name: "embeddings, 2,048 inputs (2 MB, over the 300k-token bound)",
    run: async (base, key) =>
      String(
        await send(
          base,
          "POST",
          "/v1/embeddings",
          JSON.stringify({
            model: "tinystories-260k-embed",
            input: Array.from({ length: 2048 }, () => "Tom had a red ball. ".repeat(50)),
          }),
          key,
        ),
      ),
  },
  {
    name: "chat completion, JSON nested 10,000 deep",
    run: async (base, key) => {
      const deep = "[".repeat(10_000) + "]".repeat(10_000);
      const body = `{"model":"tinystories-260k","max_tokens":4,"messages":[{"role":"user","content":"Tom"}],"metadata":{"x":${deep}}}`;
      return String(await send(base, "POST", "/v1/chat/completions", body, key));
    },
  },
  {
    name: "chat completion, 10,000 messages",
    run: async (base, key) =>
      String(
        await send(
          base,
          "POST",
          "/v1/chat/completions",
          JSON.stringify({
            model: "tinystories-260k",
            max_tokens: 4,
            messages: Array.from({ length: 10_000 }, () => ({ role: "user", content: "Tom ran." })),
          }),
          key,
        ),
      ),
  },
];

/**
 * Times `GET /v1/health` back to back until `stop` resolves; returns the waits in ms. The prober
 * runs on its own thread, so building a heavy body here (a 15 MiB string) cannot delay it.
 */
async function probe(base: string, stop: Promise<unknown>): Promise<number[]> {
  const worker = new Worker(
    `const http = require("node:http");
     const { parentPort, workerData } = require("node:worker_threads");
     const agent = new http.Agent({ keepAlive: true });
     const waits = []; let done = false;
     parentPort.on("message", () => { done = true; });
     (async () => {
       while (!done) {
         const started = performance.now();
         await new Promise((resolve) => http.get(workerData + "/v1/health", { agent }, (res) => { res.resume(); res.on("end", resolve); }).on("error", resolve));
         waits.push(performance.now() - started);
         await new Promise((r) => setTimeout(r, 5));
       }
       agent.destroy();
       parentPort.postMessage(waits);
     })();`,
    { eval: true, workerData: base },
  );
  const result = new Promise<number[]>((resolve) => worker.once("message", resolve));
  await stop.catch(() => undefined);
  worker.postMessage("stop");
  const waits = await result;
  await worker.terminate();
  return waits;
}

function startServer(dataDir: string): Promise<{ child: ChildProcess; base: string }> {
  const child = spawn(process.execPath, [path.join(root, "dist-bench/src/main.js")], {
    env: {
      ...process.env,
      PORT: "0",
      HOST: "127.0.0.1",
      SWITCHYARD_DATA_DIR: dataDir,
      SWITCHYARD_MODELS_DIR: process.env.SWITCHYARD_MODELS_DIR ?? path.resolve(root, "../shared/models"),
      SWITCHYARD_ALLOW_MODEL_DOWNLOAD: "false",
      LOG_LEVEL: "info",
    },
    stdio: ["ignore", "pipe", "inherit"],
  });
  return new Promise((resolve, reject) => {
    let buffered = "";
    child.stdout!.on("data", (chunk: Buffer) => {
      buffered += chunk.toString();
      for (const line of buffered.split("\n")) {
        if (!line.includes("Switchyard listening")) continue;
        resolve({ child, base: (JSON.parse(line) as { url: string }).url });
      }
      buffered = buffered.slice(buffered.lastIndexOf("\n") + 1);
    });
    child.on("exit", (code) => reject(new Error(`server exited with ${code}`)));
  });
}

async function main(): Promise<void> {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "switchyard-stall-"));
  const { child, base } = await startServer(dataDir);
  try {
    const signup = (await (
      await fetch(`${base}/control/v1/auth/signup`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ email: "stall@example.com", password: "stall-password" }),
      })
    ).json()) as { access_token: string };
    const { plaintext: key } = (await (
      await fetch(`${base}/control/v1/auth/api-keys`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${signup.access_token}` },
        body: JSON.stringify({ name: "stall" }),
      })
    ).json()) as { plaintext: string };

    const rows: Array<{ name: string; answer: string; ms: number; worst: number; p50: number }> = [];
    const idle = await probe(base, new Promise((r) => setTimeout(r, 2000)));
    const baseline = Math.max(...idle);
    rows.push({ name: "(idle baseline)", answer: "-", ms: 2000, worst: baseline, p50: median(idle) });
    for (const heavy of heavies) {
      const started = performance.now();
      const run = heavy.run(base, key).catch((err: Error) => `error ${err.message.slice(0, 30)}`);
      const waits = await probe(base, run);
      rows.push({
        name: heavy.name,
        answer: await run,
        ms: performance.now() - started,
        worst: Math.max(...waits),
        p50: median(waits),
      });
      process.stderr.write(`done: ${heavy.name}\n`);
    }
    console.log("\n| heavy request | answer | its time ms | health worst ms | health p50 ms | worst / idle worst |");
    console.log("|---|---|---|---|---|---|");
    for (const r of rows) {
      console.log(
        `| ${r.name} | ${r.answer} | ${r.ms.toFixed(0)} | ${r.worst.toFixed(1)} | ${r.p50.toFixed(1)} | ${(r.worst / baseline).toFixed(1)} |`,
      );
    }
    const over = rows.filter((r) => r.worst > 250);
    console.log(
      over.length === 0 ? "\nevery worst wait ≤ 250 ms" : `\nover 250 ms: ${over.map((r) => r.name).join("; ")}`,
    );
    printJson(
      "stall",
      rows.slice(1).map((r) => ({
        figure: `health worst wait during: ${r.name}`,
        unit: "ms",
        baseline,
        p50: r.p50,
        value: r.worst,
        target: "worst ≤ 250 ms",
        met: r.worst <= 250,
      })),
    );
  } finally {
    child.kill("SIGTERM");
    await new Promise((r) => child.once("exit", r));
    rmSync(dataDir, { recursive: true, force: true });
    agent.destroy();
  }
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] ?? NaN;
}

await main();
