import { strict as assert } from "node:assert";
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { createApp } from "../../src/http/app.ts";
import { openApiPath } from "../../src/http/openapi.ts";
import { apiOperations } from "../../src/server/openapi.ts";
import { routeModules } from "../../src/server/modules.ts";
import { removeDir, startTestServer } from "../helpers/server.ts";

const DOC = "docs/routes.md";
const METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"];

/** Every source file under src/ with its text, for finding where a route is registered. */
function sources(dir = "src"): { file: string; text: string }[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sources(path);
    return /\.tsx?$/.test(entry.name) ? [{ file: path, text: readFileSync(path, "utf8") }] : [];
  });
}

test(`${DOC} lists every route, where it is registered and who may call it (rewritten when stale)`, async () => {
  const server = await startTestServer();
  try {
    const app = createApp(server.server.ctx, routeModules);
    const files = sources();
    const operations = new Map(apiOperations(server.server.ctx.config).map((op) => [`${op.method.toUpperCase()} ${op.path}`, op]));
    const unfindable: string[] = [];
    const rows = new Map<string, string[]>();
    for (const route of app.routes) {
      if (!METHODS.includes(route.method)) continue;
      const key = `${route.method} ${openApiPath(route.path)}`;
      if (rows.has(key)) continue;
      // A route's path is written out whole where it is registered, so that grep finds it.
      const where = files.filter((f) => f.text.includes(`"${route.path}"`) || f.text.includes(`\`${route.path}\``)).map((f) => f.file);
      if (where.length === 0) unfindable.push(`${route.method} ${route.path}`);
      const op = operations.get(key);
      rows.set(key, [route.method, `\`${openApiPath(route.path)}\``, op?.access ?? "", op?.summary ?? "", where.map((w) => `\`${w}\``).join(", ")]);
    }
    assert.deepEqual(unfindable, [], "routes whose path is not written out literally in src/ (grep cannot find them)");
    const byPath = [...rows.values()].sort((a, b) => a[1]!.localeCompare(b[1]!) || METHODS.indexOf(a[0]!) - METHODS.indexOf(b[0]!));
    const text = [
      "# Routes",
      "",
      "Every HTTP route the appliance serves, from the registered routes themselves (written by",
      "`test/foundation/routes-doc.test.ts`, which fails when this file is stale; run it again to see it pass).",
      "Mounts: `src/server/modules.ts` lists each domain's router in order; `src/update/routes.ts` and",
      "`src/testrun/routes/index.ts` list their areas' routers. Access: `public`, `any` token, `device`",
      "token, or the scope a management token needs (per-object permissions come on top).",
      "",
      "| method | path | access | what | registered in |",
      "| --- | --- | --- | --- | --- |",
      ...byPath.map((cells) => `| ${cells.map((c) => c.replaceAll("|", "\\|")).join(" | ")} |`),
      "",
    ].join("\n");
    let before = "";
    try {
      before = readFileSync(DOC, "utf8");
    } catch {}
    if (before !== text) writeFileSync(DOC, text);
    assert.equal(before, text, `${DOC} was stale and has been rewritten: commit it`);
  } finally {
    await server.close();
    removeDir(server.dataDir);
  }
});
