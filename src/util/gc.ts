import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";

type Gc = (options?: { type?: "major" | "minor"; execution?: "sync" | "async"; flavor?: "regular" | "last-resort" }) => void;
let gc: Gc | null | undefined;

/**
 * V8's gc function, looked up at the first call: V8 gives it to contexts made while its expose-gc
 * flag is set, and the flag is set back at once (V8's flags are part of the hash that Node's code
 * cache of its own modules must match: while it is set, each built-in module loaded compiles from
 * source). Null where that is not possible.
 */
function collector(): Gc | null {
  if (gc === undefined) {
    try {
      setFlagsFromString("--expose-gc");
      gc = runInNewContext("gc") as Gc;
      setFlagsFromString("--no-expose-gc");
    } catch {
      gc = null;
    }
  }
  return gc;
}

/**
 * A young-generation garbage collection (cheap), for long streams. Each socket read of an
 * upload arrives in a fresh buffer; V8 frees a dead buffer's memory only when it collects the
 * small object holding it, and it collects when its own heap fills, not when those buffers add
 * up, so a long upload would hold many megabytes of dead buffers. Asked for every few MB of
 * stream, RSS stays flat. Where V8's collector cannot be reached this does nothing.
 */
export function collectYoungGarbage(): void {
  collector()?.({ type: "minor" });
}

/**
 * A whole-heap collection that gives memory back: V8's "last resort" one (as under memory
 * pressure), which compacts, returns free pages and shrinks the young generation to its least;
 * a plain whole-heap collection keeps the pages for reuse. Node 20's V8 (before 12) reads any
 * options as a young-generation collection, so there it is a plain whole-heap one.
 */
export function collectAllGarbage(): void {
  const collect = collector();
  if (Number(process.versions.v8.split(".")[0]) >= 12) collect?.({ type: "major", execution: "sync", flavor: "last-resort" });
  else collect?.();
}
