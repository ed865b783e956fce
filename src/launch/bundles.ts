/*
 * The two programs of a build: the whole CLI (src/main.ts) and the agent alone (src/agent/main.ts).
 * The launcher runs one of them; build/code-cache.mjs compiles them the same way to make the
 * executable's code caches. Only node: imports here: the build runs this file with Node 24's own
 * type stripping.
 */
import { dirname } from "node:path";
import { Script } from "node:vm";

export const MAIN_BUNDLE = "labgate-main.cjs";
export const AGENT_BUNDLE = "labgate-agent.cjs";
/** Parts of the agent that it loads when it needs them (src/agent/parts.ts): its config reader, its test-run engine. */
export const AGENT_CONFIG_BUNDLE = "labgate-agent-config.cjs";
export const AGENT_TESTS_BUNDLE = "labgate-agent-tests.cjs";
/** The part of the CLI that only a PostgreSQL database needs (src/db/parts.ts): Kysely's PostgreSQL side, pg, `db copy`. */
export const POSTGRES_BUNDLE = "labgate-postgres.cjs";
/** The part of the CLI that only an S3 object store needs (src/storage/parts.ts): the S3 client. */
export const S3_BUNDLE = "labgate-s3.cjs";

/** The bundle that runs `labgate COMMAND ...`: the agent needs none of the rest. */
export const bundleFor = (command: string | undefined): string => (command === "agent" ? AGENT_BUNDLE : MAIN_BUNDLE);

/** The executable's asset with V8's code cache for a bundle. */
export const codeCacheAsset = (bundle: string): string => `${bundle}.cache`;

/**
 * A CommonJS bundle compiled as Node compiles a module (the same wrapper, so that one code cache
 * fits both the build and the executable). V8 checks `cachedData` against the source, its own
 * version and flags, and compiles from the source when it does not fit (`rejected`).
 */
export function compileBundle(source: string, filename: string, cachedData?: Uint8Array) {
  const script = new Script(`(function (exports, require, module, __filename, __dirname) {${source}\n})`, { filename, cachedData });
  return {
    script,
    rejected: cachedData !== undefined && script.cachedDataRejected === true,
    /** Runs the bundle's top level with `require` (built-in modules are all a bundle loads); returns its exports. */
    run(require: NodeJS.Require, file = filename): unknown {
      const module = { exports: {} };
      script.runInThisContext()(module.exports, require, module, file, dirname(file));
      return module.exports;
    },
  };
}
