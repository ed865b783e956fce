import { strict as assert } from "node:assert";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import { build } from "esbuild";

const src = fileURLToPath(new URL("../../src/", import.meta.url));

test("the agent's bundle holds no server, database, console, HTTP route or OpenAPI code (a small board's memory)", async () => {
  const { metafile } = await build({ entryPoints: [`${src}agent/main.ts`], bundle: true, platform: "node", format: "cjs", write: false, metafile: true, logLevel: "silent" });
  const inputs = Object.keys(metafile.inputs);
  assert.ok(inputs.some((path) => path.endsWith("src/agent/agent.ts")), "the agent itself is in it");
  const server = inputs.filter((path) => /src\/(server|db|console|http|accounts|audit|backup|storage|update\/(?!client\/|channel\/protocol))|node_modules\/(hono|@hono|sql\.js|busboy|tar-stream)\//.test(path));
  assert.deepEqual(server, []);
});
