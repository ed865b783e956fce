// Durable commit and checkpoint cost of the database at 1, 10 and 50 MB images.
// Usage: npm run bench:db [-- SIZES_MB...]   e.g. npm run bench:db -- 1 10
// A checkpoint's time is its wall time (in a worker thread); the last column is how long the
// event loop itself was held at most meanwhile (monitorEventLoopDelay, 1 ms resolution).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { Database, migrate } from "../../src/db/index.ts";

const sizes = process.argv.slice(2).map(Number).filter((n) => n > 0);
const SIZES_MB = sizes.length ? sizes : [1, 10, 50];
const COMMITS = 500;
const CHECKPOINTS = 5;

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const p99 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length * 0.99)];
const ms = (start: bigint) => Number(process.hrtime.bigint() - start) / 1e6;

console.log(`node ${process.version}; ${COMMITS} sequential single-row durable commits per size; ${CHECKPOINTS} checkpoints`);
console.log("| image | commit median | commit p99 | concurrent x50 (per commit) | checkpoint median | event loop blocked by a checkpoint (max) |");
console.log("| ---: | ---: | ---: | ---: | ---: | ---: |");
for (const mb of SIZES_MB) {
  const dir = mkdtempSync(join(tmpdir(), "labgate-bench-"));
  // Size-triggered checkpoints off, so that commits are measured alone.
  const db = await Database.open(dir, { checkpointBytes: 2 ** 40, checkpointIntervalMs: 3_600_000 });
  await migrate(db, [{ version: 1, name: "bench", sql: ["CREATE TABLE filler (id INTEGER PRIMARY KEY, pad TEXT)", "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)"] }]);
  const pad = "x".repeat(1000);
  const rows = Math.ceil((mb * 1024 * 1024) / 1100);
  for (let done = 0; done < rows; done += 2000) {
    await db.write((tx) => {
      for (let i = done; i < Math.min(rows, done + 2000); i++) tx.run("INSERT INTO filler (pad) VALUES (?)", [pad]);
    });
  }
  await db.checkpoint();
  const imageMb = (db.status().image_bytes / 1024 / 1024).toFixed(1);

  const commits: number[] = [];
  for (let i = 0; i < COMMITS; i++) {
    const start = process.hrtime.bigint();
    await db.write((tx) => tx.run("INSERT INTO t (v) VALUES (?)", [`value ${i}`]));
    commits.push(ms(start));
  }

  const start = process.hrtime.bigint();
  const rounds = 10;
  for (let r = 0; r < rounds; r++) await Promise.all(Array.from({ length: 50 }, (_, i) => db.write((tx) => tx.run("INSERT INTO t (v) VALUES (?)", [`c${r}-${i}`]))));
  const concurrentPerCommit = ms(start) / (rounds * 50);

  const checkpoints: number[] = [];
  const blocked: number[] = [];
  for (let i = 0; i < CHECKPOINTS; i++) {
    await db.write((tx) => tx.run("INSERT INTO t (v) VALUES (?)", ["dirty"]));
    // The longest the event loop could not run anything else while the checkpoint was under way.
    const delay = monitorEventLoopDelay({ resolution: 1 });
    delay.enable();
    const s = process.hrtime.bigint();
    const done = db.checkpoint();
    const synchronous = ms(s); // the part that runs before the call returns (the histogram cannot see it)
    await done;
    checkpoints.push(ms(s));
    delay.disable();
    blocked.push(Math.max(synchronous, delay.max / 1e6));
  }
  await db.close();
  rmSync(dir, { recursive: true, force: true });
  console.log(
    `| ${imageMb} MB | ${median(commits).toFixed(2)} ms | ${p99(commits).toFixed(2)} ms | ${concurrentPerCommit.toFixed(3)} ms | ${median(checkpoints).toFixed(1)} ms | ${Math.max(...blocked).toFixed(1)} ms |`,
  );
}
