/**
 * Benchmark (figures printed, nothing asserted): streamed package upload and download through
 * a real `labgate serve` process, next to `cp` of the same file on the same disk, and uploads
 * next to a bare Node pipeline (bare-upload.ts: node:http, SHA-256, write, fsync; no multipart,
 * no framework) that gets the same request bytes from the same client in the same run.
 *
 *   node --import tsx scripts/bench/upload-download.ts [SIZE_MB=1024] [--dir DIR] [--rounds 3]
 *
 * Uploads alternate between labgate and the bare server, `--rounds` each (the order swapped
 * every round); the ratio of the medians is the figure of issue 14 (target >= 0.8).
 * Prints throughput in MB/s and the server's RSS: idle (after start-up), and its high-water
 * mark (VmHWM, reset through /proc/PID/clear_refs before each transfer where the kernel allows)
 * during the upload and during the download. Targets (issue 4): peak RSS no more than 40 MB
 * above idle, upload and download at least half of `cp` (which, like the upload, ends with an
 * fsync). The source file is fsynced before anything is timed (else cp competes with its
 * write-back). cp runs twice before and once after the server's transfers: on a virtual disk
 * the first gigabyte written often lands in the host's cache at several times the speed of
 * the next ones, so one cp is no baseline. The median of the three is the baseline; the ratio
 * to the fastest is printed too.
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { createReadStream, createWriteStream, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { request } from "node:http";
import { join } from "node:path";
import { once } from "node:events";
import { flag } from "./flags.ts";
import { listening } from "./server.ts";

const args = process.argv.slice(2);
const dirFlag = args.indexOf("--dir");
const baseDir = dirFlag >= 0 ? args[dirFlag + 1] : undefined;
const sizeMb = Number(args.find((a, i) => /^\d+$/.test(a) && args[i - 1] !== "--dir") ?? 1024);
const work = mkdtempSync(join(baseDir ?? process.env.TMPDIR ?? "/tmp", "labgate-bench-"));
const dataDir = join(work, "data");
const source = join(work, "package.bin");
const MB = 1024 * 1024;
const ROUNDS = flag("rounds", 3);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const mbps = (bytes: number, ms: number) => (bytes / MB / (ms / 1000)).toFixed(1);

function procStatus(pid: number): { rss: number; hwm: number } {
  const text = readFileSync(`/proc/${pid}/status`, "utf8");
  const kb = (key: string) => Number(new RegExp(`^${key}:\\s+(\\d+) kB`, "m").exec(text)?.[1] ?? 0) * 1024;
  return { rss: kb("VmRSS"), hwm: kb("VmHWM") };
}

/** Resets the process's peak RSS (VmHWM) to its current RSS; false where the kernel does not let us. */
function resetPeak(pid: number): boolean {
  try {
    writeFileSync(`/proc/${pid}/clear_refs`, "5");
    return true;
  } catch {
    return false;
  }
}

async function makeSource(): Promise<string> {
  const out = createWriteStream(source);
  const hash = createHash("sha256");
  const block = randomBytes(MB);
  for (let i = 0; i < sizeMb; i++) {
    block.writeUInt32LE(i, 0); // not all blocks alike
    hash.update(block);
    if (!out.write(block)) await once(out, "drain");
  }
  out.end();
  await once(out, "finish");
  return hash.digest("hex");
}

function startServer(): Promise<{ child: ChildProcess; url: string }> {
  const child = spawn(process.execPath, [...(process.env.BENCH_NODE_ARGS?.split(" ").filter(Boolean) ?? []), "--import", "tsx", "src/main.ts", "serve", "--data-dir", dataDir, "--listen", "127.0.0.1:0"], {
    stdio: ["ignore", "pipe", "inherit"],
    env: { ...process.env, LABGATE_CONFIG: "" },
  });
  return listening(child);
}

function startBare(dir: string): Promise<{ child: ChildProcess; url: string }> {
  mkdirSync(dir);
  const child = spawn(process.execPath, ["--import", "tsx", join(import.meta.dirname, "bare-upload.ts"), dir], { stdio: ["ignore", "pipe", "inherit"] });
  return listening(child);
}

function upload(url: string, token: string, version = "bench"): Promise<{ status: number; body: string }> {
  const boundary = "----labgate-bench";
  const head = Buffer.from(
    `--${boundary}\r\nContent-Disposition: form-data; name="svc.software.version"\r\n\r\n${version}\r\n` +
      `--${boundary}\r\nContent-Disposition: form-data; name="svc.hardware.devtype"\r\n\r\nbench\r\n` +
      `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="package.bin"\r\nContent-Type: application/octet-stream\r\n\r\n`,
  );
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
  return new Promise((resolve, reject) => {
    const req = request(url, {
      method: "POST",
      headers: {
        authorization: `Bearer token=${token}`,
        "content-type": `multipart/form-data; boundary=${boundary}`,
        "content-length": String(head.length + statSync(source).size + tail.length),
      },
    });
    req.on("error", reject);
    req.on("response", (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (d: string) => (body += d));
      res.on("end", () => resolve({ status: res.statusCode!, body }));
    });
    req.write(head);
    const file = createReadStream(source, { highWaterMark: MB });
    file.on("error", reject);
    file.pipe(req, { end: false });
    file.on("end", () => req.end(tail));
  });
}

function download(url: string): Promise<{ bytes: number; sha256: string }> {
  return new Promise((resolve, reject) => {
    request(url, (res) => {
      const hash = createHash("sha256");
      let bytes = 0;
      res.on("data", (d: Buffer) => {
        bytes += d.length;
        hash.update(d);
      });
      res.on("end", () => resolve({ bytes, sha256: hash.digest("hex") }));
      res.on("error", reject);
    })
      .on("error", reject)
      .end();
  });
}

async function main(): Promise<void> {
  console.log(`labgate upload/download benchmark: ${sizeMb} MB in ${work}`);
  const digest = await makeSource();
  const bytes = statSync(source).size;

  // The source's own write-back must not run during the timed parts.
  if (spawnSync("sync", [source], { stdio: "inherit" }).status !== 0) throw new Error("sync failed");
  const timedCopy = (): number => {
    const started = performance.now();
    const copy = spawnSync("sh", ["-c", `cp "${source}" "${work}/copy.bin" && sync "${work}/copy.bin"`], { stdio: "inherit" });
    const ms = performance.now() - started;
    if (copy.status !== 0) throw new Error("cp failed");
    rmSync(join(work, "copy.bin"));
    return ms;
  };
  const cpBeforeMs = [timedCopy(), timedCopy()];
  let started: number;

  const { child, url } = await startServer();
  try {
    const token = readFileSync(join(dataDir, "admin.token"), "utf8").trim();
    await new Promise((r) => setTimeout(r, 500));
    const idle = procStatus(child.pid!);

    const bareDir = join(work, "bare");
    const bare = await startBare(bareDir);
    const resettable = resetPeak(child.pid!);
    const upTimes: number[] = [];
    const bareTimes: number[] = [];
    let up: { status: number; body: string } = { status: 0, body: "" };
    let pkg: { id: number; sha256: string } = { id: 0, sha256: "" };
    let afterUpload = idle;
    const uploadBare = async () => {
      started = performance.now();
      const res = await upload(bare.url, "");
      bareTimes.push(performance.now() - started);
      if (res.status !== 200) throw new Error(`bare upload failed: ${res.status} ${res.body}`);
      for (const name of readdirSync(bareDir)) rmSync(join(bareDir, name));
    };
    const uploadLabgate = async (round: number) => {
      if (pkg.id) {
        const gone = await fetch(`${url}/api/v1/packages/${pkg.id}`, { method: "DELETE", headers: { authorization: `Bearer token=${token}` } });
        if (gone.status !== 200) throw new Error(`package delete: ${gone.status}`);
      }
      if (resettable) resetPeak(child.pid!);
      started = performance.now();
      up = await upload(`${url}/api/v1/packages`, token, `bench-${round}`);
      upTimes.push(performance.now() - started);
      if (up.status !== 200) throw new Error(`upload failed: ${up.status} ${up.body}`);
      pkg = JSON.parse(up.body) as { id: number; sha256: string };
      afterUpload = procStatus(child.pid!);
    };
    for (let round = 0; round < ROUNDS; round++) {
      if (round % 2 === 0) {
        await uploadBare();
        await uploadLabgate(round);
      } else {
        await uploadLabgate(round);
        await uploadBare();
      }
    }
    bare.child.kill("SIGTERM");
    const upMs = median(upTimes);
    const bareMs = median(bareTimes);

    const link = await new Promise<string>((resolve, reject) => {
      request(`${url}/api/v1/packages/${pkg.id}/download`, { headers: { authorization: `Bearer token=${token}` } }, (res) => {
        let body = "";
        res.on("data", (d) => (body += d));
        res.on("end", () => resolve((JSON.parse(body) as { download_url: string }).download_url));
      })
        .on("error", reject)
        .end();
    });
    if (resettable) resetPeak(child.pid!);
    started = performance.now();
    const down = await download(link);
    const downMs = performance.now() - started;
    const end = procStatus(child.pid!);
    child.kill("SIGTERM");
    await once(child, "exit");
    const cpRuns = [...cpBeforeMs, timedCopy()];
    const cpMs = [...cpRuns].sort((a, b) => a - b)[1];
    const cpBestMs = Math.min(...cpRuns);

    const ok = pkg.sha256 === digest && down.sha256 === digest && down.bytes === bytes;
    const over = (hwm: number) => `+${((hwm - idle.rss) / MB).toFixed(1)} MB over idle`;
    console.log(`machine: ${cpus().length} x ${cpus()[0]?.model ?? "?"}; node ${process.version}; load average ${loadavg().map((l) => l.toFixed(2)).join(" ")}; ${new Date().toISOString()}`);
    console.log(`cp + sync           ${mbps(bytes, cpMs).padStart(8)} MB/s  (median of ${cpRuns.map((ms) => mbps(bytes, ms)).join(", ")}: two before, one after)`);
    const share = (ms: number) => `${((cpMs / ms) * 100).toFixed(0)}% of cp, ${((cpBestMs / ms) * 100).toFixed(0)}% of the fastest cp; target >= 50%`;
    console.log(`upload (multipart)  ${mbps(bytes, upMs).padStart(8)} MB/s  (${share(upMs)}; median of ${upTimes.map((ms) => mbps(bytes, ms)).join(", ")})`);
    console.log(`bare Node upload    ${mbps(bytes, bareMs).padStart(8)} MB/s  (median of ${bareTimes.map((ms) => mbps(bytes, ms)).join(", ")}; same request bytes)`);
    console.log(`upload / bare Node  ${(bareMs / upMs).toFixed(2).padStart(8)}       (target >= 0.8)`);
    console.log(`download (signed)   ${mbps(bytes, downMs).padStart(8)} MB/s  (${share(downMs)})`);
    console.log(`server RSS idle     ${(idle.rss / MB).toFixed(1).padStart(8)} MB`);
    if (resettable) {
      console.log(`server RSS peak     ${(afterUpload.hwm / MB).toFixed(1).padStart(8)} MB during upload (${over(afterUpload.hwm)}), ${(end.hwm / MB).toFixed(1)} MB during download (${over(end.hwm)}); target <= +40 MB`);
    } else {
      console.log(`server RSS peak     ${(end.hwm / MB).toFixed(1).padStart(8)} MB over the whole run (${over(end.hwm)}; target <= +40 MB)`);
    }
    console.log(`server RSS after upload ${(afterUpload.rss / MB).toFixed(1)} MB, after download ${(end.rss / MB).toFixed(1)} MB`);
    console.log(`sha256 ${ok ? "matches" : "MISMATCH"} (${digest.slice(0, 16)}...)`);
    if (!ok) process.exitCode = 1;
  } finally {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGTERM");
      await once(child, "exit");
    }
    rmSync(work, { recursive: true, force: true });
  }
}

await main();
