/*
 * Set first thing in `labgate agent` (src/agent/main.ts imports it before anything else), for an
 * idle agent's memory on a small board (issue 31): no optimizing compilers, which the agent's light
 * JavaScript does not need. Changing V8's flags also makes them differ from those that the code
 * cache of Node's own built-in modules was made with, so the built-in modules the agent loads after
 * this are compiled from source as their functions first run, instead of each arriving whole from
 * the binary's cache: measured 2.3 MB less idle RSS (1.8 MB of it the binary's pages) for about
 * 0.1 s more CPU at start. The server keeps V8's defaults.
 */
import { setFlagsFromString } from "node:v8";

setFlagsFromString("--no-opt --no-maglev");
