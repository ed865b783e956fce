// Runs every test/**/*.test.ts and src/**/*.test.ts (the unit tests beside the modules they test), or
// those whose path contains an argument, with node:test. Node 20's --test does not expand globs, so we do.
import { spawn, spawnSync } from "node:child_process";
import { once } from "node:events";
import { existsSync, readdirSync } from "node:fs";
import { delimiter, join } from "node:path";
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
const files = [...find("test"), ...find("src")]
  .filter((f) => filters.length === 0 || filters.some((x) => f.includes(x)))
  .sort();
if (files.length === 0) {
  console.error("no test files matched");
  process.exit(1);
}
// Programs from Debian that some tests drive, by the test files that need them. Missing ones are
// installed with apt-get when running as root (as .ci/run does); otherwise the run stops before
// any test starts, naming the one command to run (a half-run suite says less than no run).
const SYSTEM_PACKAGES = [
  { pkg: "chromium", program: process.env.CHROMIUM_PATH ?? "/usr/bin/chromium", for: "test/console/", why: "the console's browser tests" },
  { pkg: "systemd", program: "systemd-analyze", for: "test/ops/service", why: "the service unit tests" },
  { pkg: "pdudaemon", program: "pdudaemon", for: "test/lab/", why: "the lab's power tests" },
  { pkg: "pdudaemon", program: "pdudaemon", for: "test/postgres/cluster-shares", why: "the power module of a share relayed between nodes" },
  { pkg: "socat", program: "socat", for: "test/lab/", why: "the lab's serial console tests" },
  { pkg: "postgresql", program: "pg_ctlcluster", for: "test/postgres/", why: "the PostgreSQL engine's tests" },
  { pkg: "mender-artifact", program: "mender-artifact", for: "test/update/artifact-", why: "the signed artifact tests" },
  { pkg: "mender-artifact", program: "mender-artifact", for: "test/update/signing-", why: "the signed artifact tests" },
  { pkg: "mender-artifact", program: "mender-artifact", for: "test/update/packages-signing", why: "the signed artifact tests" },
  { pkg: "mender-artifact", program: "mender-artifact", for: "test/console/signing-", why: "the signed artifact tests" },
  { pkg: "xdelta3", program: "xdelta3", for: "test/update/deltas", why: "the delta tests" },
  { pkg: "xdelta3", program: "xdelta3", for: "test/console/signing-", why: "the delta tests" },
  { pkg: "xdelta3", program: "xdelta3", for: "test/postgres/cluster-update-checks", why: "the delta tests" },
  { pkg: "mender-client", program: "mender", for: "test/mender/", why: "the Mender client tests" },
  { pkg: "mender-artifact", program: "mender-artifact", for: "test/mender/", why: "the Mender client tests" },
  { pkg: "swupdate", program: "swupdate", for: "test/ddi/swupdate", why: "the SWUpdate client tests" },
  { pkg: "cpio", program: "cpio", for: "test/ddi/swupdate", why: "the SWUpdate client tests" },
];
const found = (program) =>
  program.includes("/") ? existsSync(program) : (process.env.PATH ?? "").split(delimiter).some((dir) => dir && existsSync(join(dir, program)));
// LABGATE_TEST_DATABASE=postgres: every test server on PostgreSQL (test/helpers/test-database.ts), so every run needs it.
const onPostgres = process.env.LABGATE_TEST_DATABASE === "postgres";
if (process.env.LABGATE_TEST_DATABASE && !onPostgres) {
  console.error(`LABGATE_TEST_DATABASE=${process.env.LABGATE_TEST_DATABASE}: expected postgres (or unset: the embedded engine)`);
  process.exit(1);
}
const missing = SYSTEM_PACKAGES.filter((need) => (files.some((f) => f.startsWith(need.for)) || (onPostgres && need.pkg === "postgresql")) && !found(need.program));
if (missing.length > 0) {
  const names = missing.map((need) => need.pkg).join(" ");
  const command = `apt-get update && apt-get install -y --no-install-recommends ${names}`;
  // Two runs at once would collide on apt's lock and one would stop: our runs queue on a lock file of
  // their own, and apt waits for dpkg's lock when someone else (not a test run) holds it.
  const waitForApt = "-o DPkg::Lock::Timeout=900";
  const locked = `flock -w 1800 /var/lock/labgate-test-apt.lock sh -c 'apt-get ${waitForApt} update && apt-get ${waitForApt} install -y --no-install-recommends ${names}'`;
  if (process.getuid?.() !== 0) {
    console.error(`${missing.map((need) => `${need.why} need ${need.program}`).join("; ")}, which is missing. Install it, then run the tests again:\n  sudo sh -c '${command}'`);
    process.exit(1);
  }
  console.error(`installing ${names} for ${missing.map((need) => need.why).join(" and ")}: ${command}`);
  const install = spawnSync("sh", ["-c", locked], { stdio: "inherit", env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" } });
  const still = missing.filter((need) => !found(need.program));
  if (install.status !== 0 || still.length > 0) {
    console.error(`could not install ${still.map((need) => need.pkg).join(" ") || names} (apt-get exited with ${install.status}); no test was run`);
    process.exit(1);
  }
}

// Tests that start labgate as a child process run this bundle of the source, built once for the
// run, instead of each child loading the source through tsx (test/helpers/cli.ts).
const { BUNDLE_ENV, buildTestBundle } = await tsImport("../test/helpers/bundle.ts", import.meta.url);
// The test files themselves run bundled too (scripts/test-bundle.mjs: a third less CPU than loading
// the source through tsx; stack traces still point into the .ts files); LABGATE_TEST_SOURCE=1 runs
// them from source.
const fromSource = process.env.LABGATE_TEST_SOURCE === "1";
const [bundle, bundled] = await Promise.all([buildTestBundle(), fromSource ? undefined : bundleTests(process.cwd(), files)]);
// One throwaway cluster for the whole run; each test server makes its own database in it.
const cluster = onPostgres ? await (await tsImport("../test/helpers/postgres.ts", import.meta.url)).startPostgres({ maxConnections: 500 }) : undefined;
if (cluster) console.error(`tests on PostgreSQL: ${cluster.url("postgres")}`);
// A hung test fails on its own after three minutes (LABGATE_TEST_TIMEOUT_MS: another bound, as
// .ci/run gives the abuse corpus against the arm64 executable under qemu) instead of holding CI to its limit.
const timeout = Number(process.env.LABGATE_TEST_TIMEOUT_MS || 180_000);
const options = ["--enable-source-maps", "--test", "--test-concurrency=2", `--test-timeout=${timeout}`];
// LABGATE_TEST_NODE: another Node binary runs the tests (CI: the executable's Node 24, build/node24).
const node = process.env.LABGATE_TEST_NODE || process.execPath;
// Asynchronous, so that the cluster's server (a child of this process) keeps running meanwhile; a
// signal that ends the run goes to the test processes, whose exit ends this wait.
const test = spawn(node, [...(fromSource ? ["--import", "tsx"] : []), ...options, ...(bundled?.paths ?? files)], {
  stdio: "inherit",
  env: { ...process.env, [BUNDLE_ENV]: bundle, ...(cluster ? { LABGATE_TEST_POSTGRES_URL: cluster.url("postgres") } : {}) },
});
for (const signal of ["SIGINT", "SIGTERM"]) process.on(signal, () => test.kill(signal));
const [code] = await once(test, "exit");
const result = { status: code };
await bundled?.remove();
await cluster?.stop();
process.exit(result.status ?? 1);
