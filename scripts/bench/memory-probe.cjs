// Preloaded into a benchmark's server (`node -r scripts/bench/memory-probe.cjs ...`, or
// NODE_OPTIONS="-r .../memory-probe.cjs" for the executable): on SIGUSR2 it runs a full garbage
// collection, then appends one JSON line to $MEMORY_PROBE_FILE: RSS, V8's heap (live after the
// collection, and the capacity it keeps, also per space), ArrayBuffers (sql.js's in-memory database
// file among them) and each WebAssembly memory (sql.js's wasm heap), in bytes. It separates what a
// server holds from the garbage V8 has not given back.
"use strict";
const { appendFileSync } = require("node:fs");
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
  };
  appendFileSync(process.env.MEMORY_PROBE_FILE, JSON.stringify(line) + "\n");
});
