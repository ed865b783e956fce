/*
 * Set first thing in `labgate agent` (src/agent/main.ts imports it before anything else), for an
 * idle agent's memory on a small board: neither optimizing compilers nor the baseline
 * compiler (Sparkplug), which the agent's light JavaScript does not need: their code and what they
 * compile outweigh what the agent gains. Changing V8's flags also makes them differ from those
 * that the code cache of Node's own built-in modules was made with, so the built-in modules the
 * agent loads after this are compiled from source as their functions first run, a smaller cost
 * (docs/performance.md, "The figures behind the code"). The server keeps V8's defaults.
 */
import { setFlagsFromString } from "node:v8";

setFlagsFromString("--no-opt --no-maglev --no-sparkplug");
