import { strict as assert } from "node:assert";
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import { build } from "esbuild";

const root = fileURLToPath(new URL("../../", import.meta.url));

/** The executable's minification of a bundle (build/sea-config.mjs, as build.sh reads it), as esbuild API options. */
function minification(bundle: "server" | "agent") {
  const flags = execFileSync(process.execPath, ["build/sea-config.mjs", "--minify", bundle], { cwd: root, encoding: "utf8" }).trim().split(" ");
  return Object.fromEntries(flags.map((flag) => [flag.slice(2).replace(/-(\w)/g, (_, c: string) => c.toUpperCase()), true]));
}

async function bundled(entry: string, bundle: "server" | "agent"): Promise<string> {
  const { outputFiles } = await build({
    entryPoints: [`${root}src/${entry}`],
    bundle: true,
    platform: "node",
    format: "cjs",
    target: "node24",
    external: ["sql.js/dist/sql-wasm.wasm"],
    write: false,
    logLevel: "silent",
    ...minification(bundle),
  });
  return outputFiles![0].text;
}

/** esbuild's --keep-names helper, minified: it names a function by Object.defineProperty. */
const NAMED_BY_DEFINE = /"name",\{value(:\w+)?,configurable:!0\}/;

test("the executable's server bundle names no function by Object.defineProperty: each would be a dictionary-mode object, and the server holds about 19 per connected device", async () => {
  assert.match(await bundled("agent/main.ts", "agent"), NAMED_BY_DEFINE, "the agent's bundle keeps names so: the pattern finds esbuild's helper");
  assert.doesNotMatch(await bundled("main.ts", "server"), NAMED_BY_DEFINE);
});

test("the server's main bundle holds no part of pg nor the cluster's node: they are in the PostgreSQL part's bundle, loaded only for a database.url (Kysely's index, which the embedded store needs, defines its PostgreSQL dialect's classes, never constructed there)", async () => {
  const inputs = async (entry: string, define: Record<string, string> = {}) => {
    const { metafile } = await build({
      entryPoints: [`${root}src/${entry}`],
      bundle: true,
      platform: "node",
      format: "cjs",
      target: "node24",
      external: ["sql.js/dist/sql-wasm.wasm"],
      define,
      write: false,
      metafile: true,
      logLevel: "silent",
    });
    return Object.keys(metafile!.inputs);
  };
  const postgresSide = (path: string) => /node_modules\/(pg|pg-pool|pg-protocol|pg-types|pg-connection-string)\//.test(path) || /src\/(db\/(postgres-store|export|query\/postgres)|cluster\/node)\.ts$/.test(path);
  assert.ok((await inputs("db/postgres-part.ts")).some(postgresSide), "the part's bundle holds them: the pattern finds them");
  assert.deepEqual((await inputs("main.ts", { LABGATE_MAIN_BUNDLE: "true" })).filter(postgresSide), []);
});

test("the server's main bundle holds no S3 client: aws4fetch and the S3 driver are in the S3 part's bundle, loaded only with storage.driver: s3", async () => {
  const inputs = async (entry: string, define: Record<string, string> = {}) => {
    const { metafile } = await build({ entryPoints: [`${root}src/${entry}`], bundle: true, platform: "node", format: "cjs", target: "node24", external: ["sql.js/dist/sql-wasm.wasm"], define, write: false, metafile: true, logLevel: "silent" });
    return Object.keys(metafile!.inputs);
  };
  const s3Side = (path: string) => /node_modules\/aws4fetch\//.test(path) || /src\/storage\/s3\.ts$/.test(path);
  assert.ok((await inputs("storage/s3-part.ts")).some(s3Side), "the part's bundle holds them: the pattern finds them");
  assert.deepEqual((await inputs("main.ts", { LABGATE_MAIN_BUNDLE: "true" })).filter(s3Side), []);
});

test("no bundle the executable runs keeps a dynamic import(): the executable runs them as CommonJS with a code cache, where import() throws (a lazy built-in is process.getBuiltinModule)", async () => {
  const entries = ["launch/launch.ts", "main.ts", "db/postgres-part.ts", "storage/s3-part.ts", "db/checkpoint-worker.ts", "agent/main.ts", "agent/config-reader.ts", "agent/test-engine.ts"];
  const DYNAMIC_IMPORT = /\bimport\(\s*["'`]/;
  assert.match('x=await import("node:readline")', DYNAMIC_IMPORT, "the pattern finds one");
  const kept: string[] = [];
  for (const entry of entries) {
    const text = await bundled(entry, entry.startsWith("agent/") ? "agent" : "server");
    const found = text.match(new RegExp(`.{0,60}${DYNAMIC_IMPORT.source}.{0,60}`));
    if (found) kept.push(`${entry}: ${found[0]}`);
  }
  assert.deepEqual(kept, []);
});
