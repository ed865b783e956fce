import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Worker } from "node:worker_threads";
import { seaAssets } from "../util/sea.ts";
import type { CheckpointJob, CheckpointResult } from "./checkpoint-worker.ts";

/** The bundled worker's name: next to dist/labgate.cjs, and an asset inside the single executable. */
export const CHECKPOINT_WORKER_BUNDLE = "labgate-checkpoint.cjs";

/**
 * Starts the checkpoint worker in whichever form this process runs: from the executable's asset,
 * next to the bundle, or from source (through tsx on Node 20, whose loader a worker does not inherit).
 */
function startWorker(workerData: { wasm: Uint8Array }): Worker {
  const sea = seaAssets();
  if (sea) return new Worker(sea.getAsset(CHECKPOINT_WORKER_BUNDLE, "utf8"), { eval: true, workerData });
  const here = fileURLToPath(import.meta.url);
  if (!here.endsWith(".ts")) return new Worker(join(dirname(here), CHECKPOINT_WORKER_BUNDLE), { workerData });
  const source = new URL("./checkpoint-worker.ts", import.meta.url).href;
  let tsx: string | undefined;
  try {
    tsx = import.meta.resolve("tsx/esm/api");
  } catch {
    /* Node's own type stripping loads it */
  }
  if (!tsx) return new Worker(new URL(source), { workerData });
  const boot = `import(${JSON.stringify(tsx)}).then((api) => { api.register(); return import(${JSON.stringify(source)}); })`;
  return new Worker(boot, { eval: true, workerData });
}

/** The worker did not run to an answer (it could not start, or died); nothing was written. */
export class CheckpointWorkerError extends Error {}

/** How long an idle worker (and the database copy in its memory) is kept for the next checkpoint. */
const IDLE_MS = 5_000;
const idle: { worker: Worker; timer: NodeJS.Timeout }[] = [];

function takeWorker(wasm: Uint8Array): Worker {
  const spare = idle.pop();
  if (spare) {
    clearTimeout(spare.timer);
    return spare.worker;
  }
  const worker = startWorker({ wasm });
  worker.unref(); // an idle checkpoint thread never keeps the process alive
  return worker;
}

function release(worker: Worker): void {
  // A raw timer, as the database's others: it paces the database's own work in real time, which a
  // test moving the app clock must not change (and the database is made before the app's clock is handed out).
  const timer = setTimeout(() => {
    idle.splice(
      idle.findIndex((entry) => entry.worker === worker),
      1,
    );
    void worker.terminate();
  }, IDLE_MS);
  timer.unref();
  idle.push({ worker, timer });
}

/** Writes the image of generation `covered` in a worker thread; resolves with its size. */
export function checkpointInWorker(wasm: Uint8Array, job: CheckpointJob): Promise<number> {
  return new Promise((resolve, reject) => {
    let worker: Worker;
    try {
      worker = takeWorker(wasm);
    } catch (error) {
      reject(new CheckpointWorkerError((error as Error).message));
      return;
    }
    const done = () => {
      worker.off("message", onMessage);
      worker.off("error", onError);
      worker.off("exit", onExit);
    };
    const onMessage = (result: CheckpointResult) => {
      done();
      release(worker);
      if ("error" in result) reject(new Error(result.error));
      else resolve(result.bytes);
    };
    const onError = (error: Error) => {
      done();
      reject(new CheckpointWorkerError(error.message));
    };
    const onExit = (code: number) => {
      done();
      reject(new CheckpointWorkerError(`exited with code ${code}`));
    };
    worker.on("message", onMessage);
    worker.on("error", onError);
    worker.on("exit", onExit);
    worker.postMessage(job);
  });
}
