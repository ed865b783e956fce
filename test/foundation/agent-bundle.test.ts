import { strict as assert } from "node:assert";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
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

test("zod is imported as a namespace (import * as z): one `import { z }` puts all of zod, its locales too, into the bundles", () => {
  const named: string[] = [];
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (/\.tsx?$/.test(entry.name) && /import\s*\{[^}]*\}\s*from\s*"zod"/.test(readFileSync(path, "utf8"))) named.push(path);
    }
  };
  walk(src);
  assert.deepEqual(named, []);
});
