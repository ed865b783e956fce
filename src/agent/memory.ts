/*
 * An idle agent's memory on a small board (issue 31): once the agent has connected, one
 * memory-reducing garbage collection drops what its start left behind (the source that the
 * executable compiled twice over, the config's YAML and schema objects, the registration's and
 * first update check's buffers) and shrinks V8's young generation to its minimum. V8's own memory
 * reducer does the same, but only after several idle seconds (the idle agent: 56.4 MB two seconds
 * after connecting, 54.4 MB after fifteen); this gets there at once.
 */
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";

type Gc = (options?: { type: "major"; execution: "sync"; flavor: "last-resort" }) => void;

/** One memory-reducing, whole-heap collection now. */
export function collectStartupGarbage(): void {
  // V8 gives `gc` only to contexts made while --expose-gc is set; it is set back at once.
  setFlagsFromString("--expose-gc");
  const gc = runInNewContext("gc") as Gc;
  setFlagsFromString("--no-expose-gc");
  // "last-resort" is V8's memory-reducing collection (V8 12 and later: Node 24, the executable). Node
  // 20's V8 reads any options as a young-generation collection, so it gets a plain whole-heap one.
  if (Number(process.versions.v8.split(".")[0]) >= 12) gc({ type: "major", execution: "sync", flavor: "last-resort" });
  else gc();
}
