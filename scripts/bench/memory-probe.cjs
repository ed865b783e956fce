// Preloaded into a benchmark's server (`node --expose-gc -r scripts/bench/memory-probe.cjs ...`):
// on SIGUSR2 it runs a full garbage collection, then appends one JSON line to $MEMORY_PROBE_FILE:
// RSS, V8's heap (live after the collection, and the capacity it keeps), ArrayBuffers (sql.js's
// in-memory database file among them) and each WebAssembly memory (sql.js's wasm heap), in bytes.
// It separates what a server holds from the garbage V8 has not given back.
"use strict";
const { appendFileSync } = require("node:fs");

const memories = [];
const keep = (result) => {
  const instance = result.instance ?? result;
  for (const value of Object.values(instance.exports ?? {})) if (value instanceof WebAssembly.Memory) memories.push(value);
  return result;
};
const instantiate = WebAssembly.instantiate;
WebAssembly.instantiate = (...args) => instantiate.apply(WebAssembly, args).then(keep);

process.on("SIGUSR2", () => {
  globalThis.gc?.();
  const m = process.memoryUsage();
  const line = { rss: m.rss, heapUsed: m.heapUsed, heapTotal: m.heapTotal, arrayBuffers: m.arrayBuffers, wasm: memories.reduce((sum, w) => sum + w.buffer.byteLength, 0) };
  appendFileSync(process.env.MEMORY_PROBE_FILE, JSON.stringify(line) + "\n");
});
