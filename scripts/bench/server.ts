/** What the benchmarks do alike with a labgate server: wait for it to listen, seed devices, run the load generator. */
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import type { LoadResult, LoadSpec } from "./loadgen.ts";

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

/** Runs the load generator (loadgen.ts) as its own process with `spec` (written to `work`); its result. */
export async function runLoad(work: string, spec: LoadSpec): Promise<LoadResult> {
  const file = join(work, `load-${process.pid}.json`);
  writeFileSync(file, JSON.stringify(spec));
  const child = spawn(process.execPath, ["--import", "tsx", join(import.meta.dirname, "loadgen.ts"), file], { stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  child.stdout!.on("data", (d) => (out += d));
  const [code] = await once(child, "exit");
  if (code !== 0) throw new Error(`load generator exited with ${code}`);
  return JSON.parse(out) as LoadResult;
}
