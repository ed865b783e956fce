/** What the benchmarks do alike with a labgate server: wait for it to listen, seed devices, run the load generator. */
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import type { LoadResult, LoadSpec } from "./loadgen.ts";
import { seedDevices } from "./engines.ts";

/** The URL a spawned `labgate serve` (or bare-upload.ts) prints on its first "listening on" line. */
export async function listening(child: ChildProcess): Promise<{ child: ChildProcess; url: string }> {
  let out = "";
  for await (const chunk of child.stdout!) {
    out += chunk;
    const match = /listening on (\S+)/.exec(out);
    if (match) return { child, url: match[1] };
  }
  throw new Error(`server did not start: ${out}`);
}

/**
 * Inserts `count` bare devices (name = MAC, MACs counted up from `firstMac`) in one transaction and
 * returns their MACs. Takes any tree's write transaction (device-sockets seeds with a baseline checkout).
 */
export function insertDevices(tx: { run(sql: string, params: (string | number)[]): unknown }, count: number, firstMac: number): string[] {
  const now = new Date().toISOString();
  const macs: string[] = [];
  for (let i = 0; i < count; i++) {
    const mac = (firstMac + i).toString(16).padStart(12, "0").match(/../g)!.join(":");
    macs.push(mac);
    tx.run("INSERT INTO devices (created, name, mac_address, capabilities, metadata) VALUES (?, ?, ?, '{}', '{}')", [now, mac, mac]);
  }
  return macs;
}

/**
 * Runs the load generator (loadgen.ts) as its own process with `spec` (written to `work`); its
 * result. `stop` ends the load early (the measured phase is then shorter than `spec.seconds`).
 */
/** `tag` names its spec file: load generators that run at once each need their own. */
export async function runLoad(work: string, spec: LoadSpec, stop?: AbortSignal, tag = String(process.pid)): Promise<LoadResult> {
  const file = join(work, `load-${tag}.json`);
  writeFileSync(file, JSON.stringify(spec));
  const child = spawn(process.execPath, ["--import", "tsx", join(import.meta.dirname, "loadgen.ts"), file], { stdio: [stop ? "pipe" : "ignore", "pipe", "inherit"] });
  if (stop) {
    const end = () => child.stdin!.end("stop\n");
    if (stop.aborted) end();
    else stop.addEventListener("abort", end, { once: true });
    child.stdin!.on("error", () => {});
  }
  let out = "";
  child.stdout!.on("data", (d) => (out += d));
  const [code] = await once(child, "exit");
  if (code !== 0) throw new Error(`load generator exited with ${code}`);
  return JSON.parse(out) as LoadResult;
}

/** A labgate server in this process on a fresh data dir (`adjust` changes its config first); `close` removes the dir. */
export async function inProcessServer(adjust: (config: import("../../src/config/config.ts").Config) => void = () => {}) {
  const { mkdtempSync, rmSync } = await import("node:fs");
  const { join } = await import("node:path");
  const { loadConfig } = await import("../../src/config/config.ts");
  const { startServer } = await import("../../src/server/start.ts");
  const { createLogger } = await import("../../src/util/log.ts");
  const work = mkdtempSync(join(process.env.TMPDIR ?? "/tmp", "labgate-bench-"));
  const { config } = loadConfig({ env: {}, cwd: work, flags: { dataDir: join(work, "data"), listen: "127.0.0.1:0" } });
  adjust(config);
  const server = await startServer(config, { log: createLogger("error") });
  return {
    server,
    url: server.url,
    async close() {
      await server.close();
      rmSync(work, { recursive: true, force: true });
    },
  };
}

/**
 * Runs `work` while asking `GET /api/health` every 10 ms: how long it took, and the health answers'
 * slowest and median times (the event loop's stall as a client sees it). `health` alone, without
 * work, is the baseline request.
 */
export async function withHealth<T>(url: string, work: () => Promise<T>): Promise<{ result: T; ms: number; healthMax: number; healthP50: number; healthCount: number }> {
  let running = true;
  const times: number[] = [];
  const poller = (async () => {
    while (running) {
      const started = performance.now();
      await (await fetch(`${url}/api/health`)).arrayBuffer();
      times.push(performance.now() - started);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  })();
  const started = performance.now();
  const result = await work();
  const ms = performance.now() - started;
  running = false;
  await poller;
  times.sort((a, b) => a - b);
  return { result, ms, healthMax: times.at(-1) ?? 0, healthP50: times[Math.floor(times.length / 2)] ?? 0, healthCount: times.length };
}

/** `ms` with one decimal, right-aligned in `width`. */
export const ms = (value: number, width = 8): string => `${value.toFixed(1)} ms`.padStart(width + 3);

/** The p-th percentile of `values` (sorted here). */
export function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((sorted.length * p) / 100))] ?? 0;
}

/** A JSON (or multipart) call to `url`'s API as `token`; a status of 300 or more throws. */
export const apiAs =
  (url: string, token: string) =>
  async <T>(method: string, path: string, body?: unknown, form?: FormData): Promise<T> => {
    const res = await fetch(url + path, {
      method,
      headers: { authorization: `Bearer token=${token}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
      body: form ?? (body === undefined ? undefined : JSON.stringify(body)),
    });
    if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
    return res.json() as Promise<T>;
  };

/**
 * The update benchmarks' fleet on an in-process server (either engine): `count` devices in one group with the
 * packages v1.5 and v2 (device type board) and the group policy `policy`.
 */
export async function seedFleet(
  server: { url: string; ctx: { store: import("../../src/db/store.ts").Store } },
  call: ReturnType<typeof apiAs>,
  count: number,
  firstMac: number,
  policy: string,
): Promise<{ group: number; packages: number[]; rows: Array<{ id: number; mac_address: string }> }> {
  const rows = await seedDevices(server.ctx.store, count, firstMac);
  const packages: number[] = [];
  for (const version of ["v1.5", "v2"]) {
    const form = new FormData();
    form.set("svc.software.version", version);
    form.set("svc.hardware.devtype", "board");
    form.set("file", new Blob([`image ${version}`]), "image.bin");
    packages.push((await call<{ id: number }>("POST", "/api/v1/packages", undefined, form)).id);
  }
  const group = (await call<{ id: number }>("POST", "/api/v2/groups", { metadata: { name: "fleet" } })).id;
  await call("POST", `/api/v2/groups/${group}/policy`, { policy });
  await call("POST", `/api/v2/groups/${group}/package`, { packages });
  await call("PATCH", `/api/v2/groups/${group}/devices`, { add: rows.map((r) => r.id), remove: [] });
  return { group, packages, rows };
}

/**
 * Connects `tokens` to `url` from `procs` simulator processes (device-sim.ts, its spec files in
 * `work` named by `tag`); resolves with them once all are open.
 */
export async function simulators(work: string, url: string, tokens: string[], procs: number, tag = ""): Promise<ChildProcess[]> {
  const per = Math.ceil(tokens.length / procs);
  const children: ChildProcess[] = [];
  const ready: Promise<void>[] = [];
  for (let p = 0; p < procs; p++) {
    const name = `${tag}${tag ? "-" : ""}${p}`;
    const file = join(work, `sim-${name}.json`);
    writeFileSync(file, JSON.stringify({ url, prefix: "svc", tokens: tokens.slice(p * per, (p + 1) * per) }));
    const child = spawn(process.execPath, ["--import", "tsx", join(import.meta.dirname, "device-sim.ts"), file], { stdio: ["ignore", "pipe", "inherit"] });
    children.push(child);
    ready.push(
      new Promise((resolve, reject) => {
        let out = "";
        child.stdout!.on("data", (d) => {
          out += d;
          if (/connected \d+/.test(out)) resolve();
          if (/closed/.test(out)) console.log(`simulator ${name}: ${out.trim().split("\n").at(-1)}`);
        });
        child.once("exit", (code) => reject(new Error(`simulator exited with ${code}`)));
      }),
    );
  }
  await Promise.all(ready);
  return children;
}
