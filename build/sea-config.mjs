// Prints the SEA config: the bundle, plus every file under assets/, the sql.js wasm, the checkpoint
// worker's bundle and the built console (dist/console/NAME as console/NAME, see src/console/routes.ts) as assets.
import { readdirSync } from "node:fs";
import { join, relative } from "node:path";

const [main, output] = process.argv.slice(2);
const assets = { "sql-wasm.wasm": "node_modules/sql.js/dist/sql-wasm.wasm", "labgate-checkpoint.cjs": "dist/labgate-checkpoint-sea.cjs" };
const walk = (dir) =>
  readdirSync(dir, { withFileTypes: true }).forEach((entry) => {
    const path = join(dir, entry.name);
    if (entry.name.startsWith(".")) return;
    if (entry.isDirectory()) walk(path);
    else assets[relative(".", path)] = path;
  });
walk("assets");
for (const name of readdirSync("dist/console")) assets[`console/${name}`] = join("dist/console", name);
// Node flags of the executable (issue 14, idle memory): one V8 helper thread instead of four (each
// kept its own malloc arena: about 20 MB of idle RSS on this 2-core appliance), and a young
// generation of 1 MB semi-spaces, which V8 otherwise grows during start-up and keeps.
const execArgv = ["--v8-pool-size=1", "--max-semi-space-size=1"];
console.log(JSON.stringify({ main, output, disableExperimentalSEAWarning: true, useCodeCache: true, useSnapshot: false, execArgv, assets }, null, 2));
