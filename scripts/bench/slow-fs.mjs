// Preload for benchmarks only (node --import ./scripts/bench/slow-fs.mjs): makes this process's
// file flushes as slow as cheap flash (eMMC, SD cards). Every fsync/fdatasync, sync or async,
// takes SLOW_FS_SYNC_MS (default 30 ms) plus the bytes written to that descriptor since its last
// flush at SLOW_FS_MBPS (default 20 MB/s). A synchronous flush blocks the calling thread for that
// long (as the real syscall would); an asynchronous one answers that much later.
// It patches the main thread's `node:fs` only: a worker thread's flushes run at the disk's speed.
import fs from "node:fs";
import { open } from "node:fs/promises";
import { syncBuiltinESMExports } from "node:module";

const SYNC_MS = Number(process.env.SLOW_FS_SYNC_MS ?? 30);
const BYTES_PER_MS = (Number(process.env.SLOW_FS_MBPS ?? 20) * 1e6) / 1000;
const dirty = new Map();
const sleeper = new Int32Array(new SharedArrayBuffer(4));

const note = (fd, n) => dirty.set(fd, (dirty.get(fd) ?? 0) + (typeof n === "number" && n > 0 ? n : 0));
const cost = (fd) => {
  const ms = SYNC_MS + (dirty.get(fd) ?? 0) / BYTES_PER_MS;
  dirty.delete(fd);
  return ms;
};

const { writeSync, write, fsyncSync, fdatasyncSync, fsync, fdatasync } = fs;
fs.writeSync = function (fd, ...rest) {
  const n = writeSync.call(this, fd, ...rest);
  note(fd, n);
  return n;
};
fs.write = function (fd, ...rest) {
  const callback = rest.pop();
  return write.call(this, fd, ...rest, (error, n, buffer) => {
    if (!error) note(fd, n);
    callback(error, n, buffer);
  });
};
const blockingFlush = (original) =>
  function (fd) {
    Atomics.wait(sleeper, 0, 0, cost(fd));
    return original.call(this, fd);
  };
const lateFlush = (original) =>
  function (fd, callback) {
    const ms = cost(fd);
    original.call(this, fd, (error) => setTimeout(() => callback(error), ms));
  };
fs.fsyncSync = blockingFlush(fsyncSync);
fs.fdatasyncSync = blockingFlush(fdatasyncSync);
fs.fsync = lateFlush(fsync);
fs.fdatasync = lateFlush(fdatasync);

// FileHandle (fs/promises): writes counted, sync/datasync answered late.
const probe = await open("/dev/null", "r");
const FileHandle = Object.getPrototypeOf(probe);
await probe.close();
for (const name of ["write", "writeFile"]) {
  const original = FileHandle[name];
  FileHandle[name] = async function (data, ...rest) {
    const result = await original.call(this, data, ...rest);
    note(this.fd, name === "write" ? result.bytesWritten : (data?.byteLength ?? Buffer.byteLength(String(data))));
    return result;
  };
}
for (const name of ["sync", "datasync"]) {
  const original = FileHandle[name];
  FileHandle[name] = async function () {
    const ms = cost(this.fd);
    await original.call(this);
    await new Promise((resolve) => setTimeout(resolve, ms));
  };
}
syncBuiltinESMExports();
