import { createWriteStream } from "node:fs";
import { copyFile, cp, lstat, mkdir } from "node:fs/promises";
import { dirname, join } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { ReadableStream as WebReadableStream } from "node:stream/web";
import type { NodeTarget } from "../../config/config.ts";
import type { Clock } from "../../util/time.ts";
import { nodeExchange, nodeJson } from "./node-client.ts";
import { artifactsDir, reportPath, type TestrunDirs } from "../paths.ts";
import type { RunStore, TriggerRecord } from "./store.ts";

const DOWNLOAD_TIMEOUT_MS = 10 * 60_000;

/** Directory and file name parts from config or node answers become safe names. */
const safePart = (text: string) => text.replace(/[^A-Za-z0-9._-]/g, "_").replace(/^\.+/, "_");
const safeRelative = (name: string) => name.split("/").every((s) => s !== "" && s !== "." && s !== ".." && !s.includes("\0") && !s.includes("\\"));

function download(clock: Clock, node: NodeTarget, path: string, target: string): Promise<boolean> {
  return nodeExchange(clock, node, "GET", path, { timeoutMs: DOWNLOAD_TIMEOUT_MS }, async (response) => {
    if (response.status !== 200 || !response.body) {
      await response.body?.cancel();
      return false;
    }
    await mkdir(dirname(target), { recursive: true });
    await pipeline(Readable.fromWeb(response.body as WebReadableStream), createWriteStream(target, { flags: "wx" }));
    return true;
  });
}

/**
 * Builds a trigger's combined results: `local_<run>/` and `local_<run>.csv` for every run
 * here, `remote_<machine>_<run>/` and `.csv` for every run of the trigger on each contacted node.
 * Returns the directory name (under the results directory, paths.ts). Best effort: what fails is logged.
 */
export async function aggregateResults(
  dirs: TestrunDirs,
  store: RunStore,
  trigger: TriggerRecord,
  prefix: string,
  nodes: Record<string, NodeTarget>,
  clock: Clock,
  warn: (message: string) => void,
): Promise<string> {
  const name = `${safePart(prefix)}${trigger.id}`;
  const dir = join(dirs.results, name);
  await mkdir(dir, { recursive: true });

  for (const run of await store.runsOfTrigger(trigger.id)) {
    const source = artifactsDir(dirs, run.id);
    if (await lstat(source).catch(() => undefined)) {
      // Symlinks are never copied: the results are served like artifacts.
      await cp(source, join(dir, `local_${run.id}`), { recursive: true, filter: async (src) => !(await lstat(src)).isSymbolicLink() });
    }
    await copyFile(reportPath(dirs, run.id), join(dir, `local_${run.id}.csv`)).catch(() => {});
  }

  for (const machine of Object.keys(trigger.nodes)) {
    const node = nodes[machine];
    if (!node) continue;
    try {
      const answer = await nodeJson(clock, node, "GET", `/api/v1/test-runs/trigger/${encodeURIComponent(trigger.id)}`);
      const runs = answer.json && typeof answer.json === "object" ? ((answer.json as { runs?: unknown }).runs as { id?: unknown }[] | undefined) : undefined;
      for (const run of Array.isArray(runs) ? runs : []) {
        const runId = String(run.id ?? "");
        if (!runId) continue;
        const base = `remote_${safePart(machine)}_${safePart(runId)}`;
        const runPath = `/api/v1/test-runs/${encodeURIComponent(runId)}`;
        await download(clock, node, `${runPath}/report`, join(dir, `${base}.csv`)).catch((e) => warn(`report of ${machine}/${runId}: ${(e as Error).message}`));
        const list = await nodeJson(clock, node, "GET", `${runPath}/artifacts`);
        await mkdir(join(dir, base), { recursive: true });
        for (const artifact of Array.isArray(list.json) ? (list.json as { name?: unknown }[]) : []) {
          const artifactName = String(artifact.name ?? "");
          if (!safeRelative(artifactName)) continue;
          const encoded = artifactName.split("/").map(encodeURIComponent).join("/");
          await download(clock, node, `${runPath}/artifacts/${encoded}`, join(dir, base, ...artifactName.split("/"))).catch((e) =>
            warn(`artifact ${artifactName} of ${machine}/${runId}: ${(e as Error).message}`),
          );
        }
      }
    } catch (error) {
      warn(`results of '${machine}': ${(error as Error).message}`);
    }
  }
  return name;
}
