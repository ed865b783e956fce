// Runs every test/**/*.test.ts (or those whose path contains an argument) with node:test. Node 20's
// --test does not expand globs, so we do.
import { spawnSync } from "node:child_process";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { tsImport } from "tsx/esm/api";
import { bundleTests } from "./test-bundle.mjs";

function find(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return find(path);
    return entry.name.endsWith(".test.ts") ? [path] : [];
  });
}

const filters = process.argv.slice(2);
const files = find("test")
  .filter((f) => filters.length === 0 || filters.some((x) => f.includes(x)))
  .sort();
if (files.length === 0) {
  console.error("no test files matched");
  process.exit(1);
}
// Tests that start labgate as a child process run this bundle of the source, built once for the
// run, instead of each child loading the source through tsx (test/helpers/cli.ts).
const { BUNDLE_ENV, buildTestBundle } = await tsImport("../test/helpers/bundle.ts", import.meta.url);
// The test files themselves run bundled too (scripts/test-bundle.mjs: a third less CPU than loading
// the source through tsx; stack traces still point into the .ts files); LABGATE_TEST_SOURCE=1 runs
// them from source.
const fromSource = process.env.LABGATE_TEST_SOURCE === "1";
const [bundle, bundled] = await Promise.all([buildTestBundle(), fromSource ? undefined : bundleTests(process.cwd(), files)]);
// A hung test fails on its own after three minutes (LABGATE_TEST_TIMEOUT_MS: another bound, as
// .ci/run gives the abuse corpus against the arm64 executable under qemu) instead of holding CI to its limit.
const timeout = Number(process.env.LABGATE_TEST_TIMEOUT_MS || 180_000);
const options = ["--enable-source-maps", "--test", "--test-concurrency=2", `--test-timeout=${timeout}`];
// LABGATE_TEST_NODE: another Node binary runs the tests (CI: the executable's Node 24, build/node24).
const node = process.env.LABGATE_TEST_NODE || process.execPath;
const result = spawnSync(node, [...(fromSource ? ["--import", "tsx"] : []), ...options, ...(bundled?.paths ?? files)], {
  stdio: "inherit",
  env: { ...process.env, [BUNDLE_ENV]: bundle },
});
await bundled?.remove();
process.exit(result.status ?? 1);
