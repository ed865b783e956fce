import { mkdirSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { build, type BuildOptions } from "esbuild";
import { AGENT_ALIASES, AGENT_DEFINE } from "../../src/agent/bundle.ts";

/** The variable scripts/run-tests.mjs passes the bundle's path in (test/helpers/cli.ts starts children with it). */
export const BUNDLE_ENV = "LABGATE_TEST_BUNDLE";

/** Inside the project (gitignored), so that the bundle's require of node_modules resolves. */
const DEFAULT_DIR = fileURLToPath(new URL("../../.tmp/test-bundle/", import.meta.url));
const src = (path: string) => fileURLToPath(new URL(`../../src/${path}`, import.meta.url));

/** build/build.sh's bundle() for node20: the same flags, so that the children run what dist/labgate.cjs runs. */
const OPTIONS: BuildOptions = {
  bundle: true,
  platform: "node",
  format: "cjs",
  target: "node20",
  legalComments: "none",
  logLevel: "warning",
  external: ["sql.js/dist/sql-wasm.wasm"],
  define: { "import.meta.url": "__importMetaUrl" },
  banner: { js: 'const __importMetaUrl = require("node:url").pathToFileURL(__filename).href;' },
};

/** The agent's bundles: src/agent/bundle.ts's options. */
const MAIN: BuildOptions = { ...OPTIONS, define: { ...OPTIONS.define, LABGATE_MAIN_BUNDLE: "true" } };
const AGENT: BuildOptions = { ...OPTIONS, alias: AGENT_ALIASES, define: { ...OPTIONS.define, ...AGENT_DEFINE } };

/**
 * The database crash tests' writer (it awaits at the top level, so an ES module), with the same
 * checkpoint worker bundle beside it as dist/labgate.cjs has.
 */
const CRASH_WRITER: BuildOptions = {
  ...OPTIONS,
  format: "esm",
  define: {},
  // Its CommonJS dependencies (sql.js) require Node's modules and read __dirname.
  banner: {
    js: [
      'import { createRequire as __createRequire } from "node:module";',
      'import { dirname as __dirnameOf } from "node:path";',
      'import { fileURLToPath as __pathOf } from "node:url";',
      "const require = __createRequire(import.meta.url);",
      "const __filename = __pathOf(import.meta.url);",
      "const __dirname = __dirnameOf(__filename);",
    ].join("\n"),
  },
};

/**
 * Bundles the launcher into DIR/labgate.cjs, src/main.ts and src/agent/main.ts beside it, with the checkpoint worker's bundle (where
 * src/db/worker.ts looks for it), as `npm run build` makes dist/labgate.cjs; and the crash tests'
 * writer into DIR/crash-writer.mjs. Returns labgate.cjs's path.
 * Each file is written under a temporary name and renamed, so that a test process starting a
 * child while another process rebuilds never reads half a file. The console is not built beside
 * it: no child-process test asks for it.
 */
export async function buildTestBundle(dir = DEFAULT_DIR): Promise<string> {
  const bundles: Array<[string, string, BuildOptions]> = [
    ["labgate-checkpoint.cjs", src("db/checkpoint-worker.ts"), OPTIONS],
    // The launcher and its two programs, as in dist/: child `labgate agent`s run the agent's own bundle.
    ["labgate.cjs", src("launch/launch.ts"), OPTIONS],
    ["labgate-main.cjs", src("main.ts"), MAIN],
    ["labgate-postgres.cjs", src("db/postgres-part.ts"), OPTIONS],
    ["labgate-s3.cjs", src("storage/s3-part.ts"), OPTIONS],
    ["labgate-agent.cjs", src("agent/main.ts"), AGENT],
    ["labgate-agent-config.cjs", src("agent/config-reader.ts"), AGENT],
    ["labgate-agent-tests.cjs", src("agent/test-engine.ts"), AGENT],
    ["crash-writer.mjs", fileURLToPath(new URL("../fixtures/crash-writer.ts", import.meta.url)), CRASH_WRITER],
  ];
  const built = await Promise.all(bundles.map(([name, entry, options]) => build({ ...options, write: false, entryPoints: [entry], outfile: join(dir, name) })));
  mkdirSync(dir, { recursive: true });
  for (const { outputFiles } of built) {
    for (const file of outputFiles) {
      const temporary = `${file.path}.${process.pid}.tmp`;
      writeFileSync(temporary, file.contents);
      renameSync(temporary, file.path);
    }
  }
  return join(dir, "labgate.cjs");
}
