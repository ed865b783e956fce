// Preloaded into a benchmark's server (`node -r scripts/bench/memory-probe.cjs ...`, or
// NODE_OPTIONS="-r .../memory-probe.cjs" for the executable): on SIGUSR2 it runs a full garbage
// collection, then appends one JSON line to $MEMORY_PROBE_FILE: RSS, V8's heap (live after the
// collection, and the capacity it keeps, also per space), ArrayBuffers (sql.js's in-memory database
// file among them) and each WebAssembly memory (sql.js's wasm heap), in bytes. It separates what a
// server holds from the garbage V8 has not given back.
"use strict";
const { appendFileSync, readFileSync } = require("node:fs");
const v8 = require("node:v8");
const vm = require("node:vm");

const memories = [];
const keep = (result) => {
  const instance = result.instance ?? result;
  for (const value of Object.values(instance.exports ?? {})) if (value instanceof WebAssembly.Memory) memories.push(value);
  return result;
};
const instantiate = WebAssembly.instantiate;
WebAssembly.instantiate = (...args) => instantiate.apply(WebAssembly, args).then(keep);

// The collector is exposed on the first probe, not by --expose-gc: a flag at start would change
// V8's flag hash, and the executable would refuse its code cache (and start otherwise than it ships).
let gc = globalThis.gc;
const collect = () => {
  if (!gc) {
    v8.setFlagsFromString("--expose-gc");
    gc = vm.runInNewContext("gc");
  }
  gc();
};

/** Per V8 space (old, new, large objects, code): what it keeps and what of it is live, in bytes. */
const spaces = () => {
  const out = {};
  for (const s of v8.getHeapSpaceStatistics()) {
    const name = s.space_name.replace(/_space$/, "");
    if (s.space_size > 0) out[name] = { size: s.space_size, used: s.space_used_size };
  }
  return out;
};

/**
 * Resident memory by kind of mapping (/proc/self/smaps), in bytes: V8's heap pages (anonymous
 * 256 KiB mappings, pages V8 keeps pooled for reuse included, which heapTotal leaves out), glibc's
 * main malloc arena ([heap]), other anonymous memory (other malloc arenas, large objects, the wasm
 * heap, code), and the executable's and libraries' file pages.
 */
const resident = () => {
  const out = { v8Pages: 0, mallocMain: 0, otherAnon: 0, file: 0 };
  let kind;
  for (const line of readFileSync("/proc/self/smaps", "utf8").split("\n")) {
    const map = /^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (map) {
      const size = parseInt(map[2], 16) - parseInt(map[1], 16);
      const name = map[3];
      kind = name === "[heap]" ? "mallocMain" : name.startsWith("/") ? "file" : name ? undefined : size === 262144 ? "v8Pages" : "otherAnon";
    } else if (kind && line.startsWith("Rss:")) out[kind] += Number(line.split(/\s+/)[1]) * 1024;
  }
  return out;
};

process.on("SIGUSR2", () => {
  collect();
  const m = process.memoryUsage();
  const line = {
    rss: m.rss,
    heapUsed: m.heapUsed,
    heapTotal: m.heapTotal,
    external: m.external,
    arrayBuffers: m.arrayBuffers,
    wasm: memories.reduce((sum, w) => sum + w.buffer.byteLength, 0),
    spaces: spaces(),
    resident: resident(),
  };
  appendFileSync(process.env.MEMORY_PROBE_FILE, JSON.stringify(line) + "\n");
});
