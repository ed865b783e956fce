/*
 * The entry of dist/labgate.cjs and of the single executable: `labgate agent` runs the agent's own
 * bundle, every other command the whole program's, so that an agent on a small board neither
 * loads nor parses the server's code. In the executable both bundles are assets, compiled with
 * the code cache that the build made for each by running it (build/code-cache.mjs): functions a
 * start runs need no compiling.
 */
import { createRequire } from "node:module";
import { seaAssets } from "../util/sea.ts";
import { bundleFor, codeCacheAsset, compileBundle } from "./bundles.ts";

const bundle = bundleFor(process.argv[2]);
const sea = seaAssets();
if (sea) {
  let cache: Uint8Array | undefined;
  try {
    cache = new Uint8Array(sea.getRawAsset(codeCacheAsset(bundle)));
  } catch {
    // A build without code caches: compiled from the source.
  }
  // Inside the executable `require` loads built-in modules only, as the bundles need.
  const program = compileBundle(sea.getAsset(bundle, "utf8"), bundle, cache);
  // Only a build that mixed up its Node binaries gets here (scripts/smoke-executable.sh looks for this line).
  if (program.rejected) process.stderr.write(`labgate: V8 refused the code cache of ${bundle}; compiling from source (slower start)\n`);
  program.run(require, process.execPath);
} else {
  createRequire(import.meta.url)(`./${bundle}`);
}
