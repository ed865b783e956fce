/*
 * Set first thing in `labgate agent` (src/agent/main.ts imports it before anything else), for an
 * idle agent's memory on a small board: neither optimizing compilers nor the baseline
 * compiler (Sparkplug), which the agent's light JavaScript does not need. Measured in the executable
 * (idle, connected): without these flags the optimizers' own code costs 2.1 MB more of the
 * executable's pages; Sparkplug's compiled code 0.4 MB more. Changing V8's flags also makes them
 * differ from those that the code cache of Node's own built-in modules was made with, so the
 * built-in modules the agent loads after this are compiled from source as their functions first
 * run: that itself costs about as much memory (0.2 MB more read-only pages, the same heap) and
 * costs about 0.1 s more CPU at start. The server keeps V8's defaults.
 */
import { setFlagsFromString } from "node:v8";

setFlagsFromString("--no-opt --no-maglev --no-sparkplug");
