// Prints the SEA config of one executable: the launcher (src/launch/launch.ts) as its main script,
// and as assets its two programs with their code caches from CACHE_DIR (made by build/code-cache.mjs
// for that architecture), the agent's parts (src/agent/parts.ts), the checkpoint worker's bundle,
// the sql.js wasm, every file under assets/, and the built console (dist/console/NAME as
// console/NAME, see src/console/routes.ts).
//
//   node build/sea-config.mjs SEA_DIR CACHE_DIR OUTPUT    the config (JSON)
//   node build/sea-config.mjs --flags                     the executable's Node flags
//   node build/sea-config.mjs --minify server|agent       esbuild's minification of those bundles
import { existsSync, readdirSync } from "node:fs";
import { join, relative } from "node:path";

// Node flags of the executable (issue 14, idle memory): one V8 helper thread instead of four (each
// kept its own malloc arena: about 20 MB of idle RSS on this 2-core appliance), and a young
// generation of 1 MB semi-spaces, which V8 otherwise grows during start-up and keeps.
const execArgv = ["--v8-pool-size=1", "--max-semi-space-size=1"];
// esbuild's minification of the executable's bundles (build.sh): the executable is near its size
// bound, and source is memory. The agent's local names are shortened, its functions and classes
// keep theirs (--keep-names: what a stack trace in its log shows). The server's (and its worker's)
// names are not shortened (0.47 MB more source): --keep-names names each function by
// Object.defineProperty, which turns the function into a dictionary-mode object (+256 B), and the
// server holds about 19 such closures per connected device for the socket's life (hono's Context
// and request, @hono/node-server, the channel's handlers): 4.8 of the 22 KiB per socket (README,
// issue 31).
const minify = { server: ["--minify-whitespace", "--minify-syntax"], agent: ["--minify", "--keep-names"] };
if (process.argv[2] === "--flags") {
  console.log(execArgv.join(" "));
  process.exit(0);
}
if (process.argv[2] === "--minify") {
  console.log(minify[process.argv[3]].join(" "));
  process.exit(0);
}

const [seaDir, cacheDir, output] = process.argv.slice(2);
const assets = { "sql-wasm.wasm": "node_modules/sql.js/dist/sql-wasm.wasm" };
for (const name of ["labgate-main.cjs", "labgate-agent.cjs", "labgate-agent-config.cjs", "labgate-agent-tests.cjs", "labgate-postgres.cjs", "labgate-s3.cjs", "labgate-checkpoint.cjs"]) {
  assets[name] = join(seaDir, name);
  const cache = join(cacheDir, `${name}.cache`);
  if (existsSync(cache)) assets[`${name}.cache`] = cache;
}
const walk = (dir) =>
  readdirSync(dir, { withFileTypes: true }).forEach((entry) => {
    const path = join(dir, entry.name);
    if (entry.name.startsWith(".")) return;
    if (entry.isDirectory()) walk(path);
    else assets[relative(".", path)] = path;
  });
walk("assets");
for (const name of readdirSync("dist/console")) assets[`console/${name}`] = join("dist/console", name);
const main = join(seaDir, "labgate.cjs");
console.log(JSON.stringify({ main, output, disableExperimentalSEAWarning: true, useCodeCache: true, useSnapshot: false, execArgv, assets }, null, 2));
