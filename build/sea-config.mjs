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
console.log(JSON.stringify({ main, output, disableExperimentalSEAWarning: true, useCodeCache: true, useSnapshot: false, assets }, null, 2));
