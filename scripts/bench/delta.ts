/**
 * Benchmark (figures printed, nothing asserted): a delta of an image against the same image with
 * 1 % of it changed in scattered 4 KiB blocks, made and applied with xdelta3 exactly as the gateway
 * (src/update/packages/deltas.ts: the target streamed in, the base by path) and the agent
 * (src/agent/delta.ts: the result streamed out, hashed on its way) run it. Prints the bytes a
 * device gets (full vs delta), the time to make and to apply, and the peak RSS of xdelta3 on each
 * side (GNU time) and of this process, which streams the bytes as labgate does.
 *
 *   node --import tsx scripts/bench/delta.ts [SIZE_MB=64]
 */
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { createReadStream, createWriteStream, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Transform } from "node:stream";
import { pipeline } from "node:stream/promises";

const sizeMb = Number(process.argv[2] ?? 64);
const size = sizeMb * 1024 * 1024;
const dir = mkdtempSync(join(tmpdir(), "labgate-bench-delta-"));
const BLOCK = 4096;

let peakRss = 0;
const sample = setInterval(() => (peakRss = Math.max(peakRss, process.memoryUsage().rss)), 20);

function makeImages(): { base: string; target: string } {
  const image = Buffer.alloc(size);
  let x = 2463534242;
  for (let i = 0; i < size; i += 4) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    image.writeUInt32LE(x >>> 0, i);
  }
  const base = join(dir, "base.img");
  writeFileSync(base, image);
  // 1 % of the blocks, spread over the image.
  const blocks = size / BLOCK;
  const changed = Math.max(1, Math.round(blocks / 100));
  // New bytes, not a pattern xdelta3 would compress away.
  let y = 88675123;
  for (let n = 0; n < changed; n++) {
    const at = Math.floor((n * blocks) / changed + 3) * BLOCK;
    for (let i = at; i < at + BLOCK; i += 4) {
      y ^= y << 13;
      y ^= y >>> 17;
      y ^= y << 5;
      image.writeUInt32LE(y >>> 0, i);
    }
  }
  const target = join(dir, "target.img");
  writeFileSync(target, image);
  return { base, target };
}

/** Runs xdelta3 under GNU time; `input`/`output` stream through this process. Resolves with seconds and xdelta3's peak RSS (KiB). */
async function xdelta(args: string[], input: string | undefined, output: string): Promise<{ seconds: number; rssKb: number; sha256: string }> {
  const started = process.hrtime.bigint();
  const child = spawn("/usr/bin/time", ["-f", "%M", "xdelta3", ...args], { stdio: [input ? "pipe" : "ignore", "pipe", "pipe"] });
  let stderr = "";
  child.stderr!.on("data", (chunk: Buffer) => (stderr += chunk));
  const hash = createHash("sha256");
  const meter = new Transform({ transform: (chunk: Buffer, _e, done) => (hash.update(chunk), done(null, chunk)) });
  const writing = pipeline(child.stdout!, meter, createWriteStream(output));
  if (input) await pipeline(createReadStream(input), child.stdin!);
  await writing;
  const code = await new Promise<number>((resolve) => child.once("close", (c) => resolve(c ?? -1)));
  if (code !== 0) throw new Error(`xdelta3 ${args.join(" ")} exited ${code}: ${stderr}`);
  return { seconds: Number(process.hrtime.bigint() - started) / 1e9, rssKb: Number(stderr.trim().split("\n").pop()), sha256: hash.digest("hex") };
}

const { base, target } = makeImages();
const made = await xdelta(["-e", "-c", "-q", "-s", base], target, join(dir, "delta.vcdiff"));
const applied = await xdelta(["-d", "-c", "-q", "-s", base, join(dir, "delta.vcdiff")], undefined, join(dir, "rebuilt.img"));
clearInterval(sample);
const targetSha = createHash("sha256").update(readFileSync(target)).digest("hex");
const deltaBytes = statSync(join(dir, "delta.vcdiff")).size;
const mb = (bytes: number) => (bytes / 1048576).toFixed(1);
console.log(`image ${sizeMb} MB, 1 % changed in ${Math.round(size / BLOCK / 100)} scattered ${BLOCK}-byte blocks`);
console.log(`bytes sent: full ${size} (${mb(size)} MB), delta ${deltaBytes} (${mb(deltaBytes)} MB, ${((deltaBytes / size) * 100).toFixed(2)} %)`);
console.log(`make (gateway): ${made.seconds.toFixed(2)} s, xdelta3 peak RSS ${mb(made.rssKb * 1024)} MB`);
console.log(`apply (agent): ${applied.seconds.toFixed(2)} s, xdelta3 peak RSS ${mb(applied.rssKb * 1024)} MB; result ${applied.sha256 === targetSha ? "matches" : "DOES NOT match"} the target's sha256`);
console.log(`this process (streaming both ways, the images made in memory first): peak RSS ${mb(peakRss)} MB`);
rmSync(dir, { recursive: true, force: true });
