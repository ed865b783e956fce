import { strict as assert } from "node:assert";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { requirementOf } from "../../src/auth/middleware.ts";
import { openApiPath } from "../../src/http/openapi.ts";
import { removeDir, startTestServer } from "../helpers/server.ts";
import { checkGeneratedDoc } from "../helpers/generated-doc.ts";

const DOC = "docs/routes.md";
const REGENERATE = "npm run routes-doc";
const METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"];

/** The server's source files with their text, for finding where a route is registered: not the unit tests beside them, nor the console (src/console/app), which calls routes (`api.post("/api/...")`) but registers none. */
function sources(dir = "src"): { file: string; text: string }[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return path === join("src", "console", "app") ? [] : sources(path);
    return /\.tsx?$/.test(entry.name) && !entry.name.endsWith(".test.ts") ? [{ file: path, text: readFileSync(path, "utf8") }] : [];
  });
}

test(`${DOC} lists every route, who may call it and the file that registers it (${REGENERATE} rewrites it)`, async () => {
  const server = await startTestServer();
  try {
    const { app } = server.server;
    const files = sources();
    const operations = new Map(server.server.operations.map((op) => [`${op.method.toUpperCase()} ${op.path}`, op]));
    // The auth check of a route is one of its handlers; Hono lists each handler as a route entry.
    const required = new Map<string, string>();
    for (const route of app.routes) {
      const requirement = requirementOf(route.handler);
      if (requirement) required.set(`${route.method} ${route.path}`, requirement);
    }
    const unfindable: string[] = [];
    const rows = new Map<string, { path: string; cells: string[] }>();
    for (const route of app.routes) {
      if (!METHODS.includes(route.method)) continue;
      const key = `${route.method} ${openApiPath(route.path)}`;
      if (rows.has(key)) continue;
      // A route's path is written out whole where it is registered (`.get("/api/...", ` or
      // `route(app, { method: "get", path: "/api/...", `), so that grep finds it.
      const quoted = route.path.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
      const method = route.method.toLowerCase();
      const registration = new RegExp(`\\.${method}\\(\\s*"${quoted}"|\\broute\\(\\s*\\w+,\\s*\\{\\s*method: "${method}",\\s*path: "${quoted}"`);
      const where = files.filter((f) => registration.test(f.text)).map((f) => f.file);
      if (where.length === 0) unfindable.push(`${route.method} ${route.path}`);
      const op = operations.get(key);
      const access = required.get(`${route.method} ${route.path}`) ?? (op?.access === "management" ? "mgmt" : op?.access) ?? "";
      rows.set(key, { path: route.path, cells: [route.method, `\`${route.path}\``, access, op?.summary ?? "", where.map((w) => `\`${w}\``).join(", ")] });
    }
    assert.deepEqual(unfindable, [], "routes whose path is not written out as one string literal in src/ (grep cannot find them)");
    const sorted = [...rows.values()]
      .sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0) || METHODS.indexOf(a.cells[0]!) - METHODS.indexOf(b.cells[0]!))
      .map((row) => row.cells);
    const text = [
      "# Routes",
      "",
      "Every HTTP route the appliance serves with the default config (Variant A test-run API), from the",
      "registered routes themselves. Written by `test/foundation/routes-doc.test.ts`, which fails when",
      `this file is stale: \`${REGENERATE}\` rewrites it.`,
      "",
      "Where they are mounted: `src/server/routes.ts` (the route table) lists every router in order;",
      "`/api/health` and `/api/whoami` come first (`src/http/system.ts`). Access: the scopes a management",
      "(`mgmt`) token needs (admin scopes imply the rest, `src/auth/scopes.ts`), `device` or `any` token, or",
      "`public` (some public routes need a signed link); per-object permissions come on top. With",
      "`test_server.auth: none` the test-run routes need no token.",
      "",
      "| method | path | access | what | registered in |",
      "| --- | --- | --- | --- | --- |",
      ...sorted.map((cells) => `| ${cells.map((c) => c.replaceAll("|", "\\|")).join(" | ")} |`),
      "",
    ].join("\n");
    checkGeneratedDoc(DOC, text, "UPDATE_ROUTES_DOC", REGENERATE);
  } finally {
    await server.close();
    removeDir(server.dataDir);
  }
});
