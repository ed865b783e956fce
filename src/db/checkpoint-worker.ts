// Checkpoints off the main thread: for each job, rebuilds the state of journal generation
// `covered` from the files (the last image plus the journals after it, all durable already),
// exports it and writes the new image. The thread is ended soon after its last job, which frees
// its copy of the database.
import { join } from "node:path";
import { parentPort, workerData } from "node:worker_threads";
import initSqlJs from "sql.js";
import { writeFileDurable } from "../util/files.ts";
import { IMAGE_FILE, imageSum, markGeneration, openImage, replayJournals, writeImageSum } from "./image.ts";

export interface CheckpointJob {
  dir: string;
  covered: number;
}
export type CheckpointResult = { bytes: number } | { error: string };

const wasm = (workerData as { wasm: Uint8Array }).wasm;
const ready = initSqlJs({ wasmBinary: wasm.buffer.slice(wasm.byteOffset, wasm.byteOffset + wasm.byteLength) as ArrayBuffer });

async function run({ dir, covered }: CheckpointJob): Promise<CheckpointResult> {
  const { sql, generation } = openImage(await ready, dir);
  try {
    replayJournals(sql, dir, generation, covered);
    markGeneration(sql, covered);
    const image = sql.export();
    writeFileDurable(join(dir, IMAGE_FILE), image);
    writeImageSum(dir, imageSum(image));
    return { bytes: image.length };
  } finally {
    sql.close();
  }
}

parentPort!.on("message", (job: CheckpointJob) => {
  run(job).then(
    (result) => parentPort!.postMessage(result),
    (error: Error) => parentPort!.postMessage({ error: error.message } satisfies CheckpointResult),
  );
});
