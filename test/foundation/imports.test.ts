import { strict as assert } from "node:assert";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { test } from "node:test";
import ts from "typescript";

/** A unit test beside its module (`*.test.ts`): not part of the program, and no module imports it. */
const isUnitTest = (name: string) => name.endsWith(".test.ts");

/** Every module under src/ (not the unit tests beside them) and the relative modules it imports (type imports too). */
function importGraph(root: string): Map<string, string[]> {
  const files: string[] = [];
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (/\.tsx?$/.test(entry.name) && !isUnitTest(entry.name)) files.push(resolve(path));
    }
  };
  walk(root);
  const graph = new Map<string, string[]>();
  for (const file of files) {
    const { importedFiles } = ts.preProcessFile(readFileSync(file, "utf8"), true, true);
    graph.set(file, importedFiles.filter((i) => i.fileName.startsWith(".")).map((i) => resolve(dirname(file), i.fileName)));
  }
  return graph;
}

/** Strongly connected components of more than one module, or a module importing itself (Tarjan). */
function cycles(graph: Map<string, string[]>): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (v: string) => {
    index.set(v, next);
    low.set(v, next++);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!graph.has(w)) continue;
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) !== index.get(v)) return;
    const component: string[] = [];
    let w: string;
    do {
      w = stack.pop()!;
      onStack.delete(w);
      component.push(w);
    } while (w !== v);
    if (component.length > 1 || (graph.get(v) ?? []).includes(v)) found.push(component);
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return found;
}

test("src/ has no import cycles (type imports included): each layer can be read and tested on its own", () => {
  const graph = importGraph("src");
  assert.ok(graph.size > 50, `found only ${graph.size} modules`);
  const found = cycles(graph).map((c) => c.map((f) => relative(process.cwd(), f)).sort());
  assert.deepEqual(found, [], `import cycles:\n${found.map((c) => "  " + c.join(" -> ")).join("\n")}`);
});

test("the cycle finder finds a cycle", () => {
  const graph = new Map([["a", ["b"]], ["b", ["c"]], ["c", ["a"]], ["d", ["a"]]]);
  assert.deepEqual(cycles(graph).map((c) => c.sort()), [["a", "b", "c"]]);
});

test("no console page imports another page: what two pages share lives in ui.tsx or a shared module beside it", () => {
  const pages = resolve("src/console/app/pages");
  const graph = importGraph(pages);
  const found = [...graph]
    .filter(([file]) => !file.endsWith("index.ts"))
    .flatMap(([file, imports]) => imports.filter((i) => dirname(i) === pages).map((i) => `${relative(pages, file)} -> ${relative(pages, i)}`));
  assert.deepEqual(found, []);
});

test("only the start-up code and the command line import src/server/: the domains depend on src/app/context.ts", () => {
  const graph = importGraph("src");
  const server = resolve("src/server");
  // The console's client takes the route registry's types (src/server/api.ts: types only, no code in its bundle).
  const registry = (file: string, imported: string) => file === resolve("src/console/app/api.ts") && imported === resolve("src/server/api.ts");
  const outside = (file: string) => !file.startsWith(`${server}/`) && !file.startsWith(`${resolve("src/cli")}/`) && file !== resolve("src/main.ts");
  const found = [...graph].filter(([file]) => outside(file)).flatMap(([file, imports]) => imports.filter((i) => i.startsWith(`${server}/`) && !registry(file, i)).map((i) => `${relative("src", file)} -> ${relative("src", i)}`));
  assert.deepEqual(found, []);
});

test("no module under src/ imports a unit test (*.test.ts): the bundles of the server, the agent and the console, built from their entries, hold none", () => {
  const found = [...importGraph("src")].flatMap(([file, imports]) => imports.filter((i) => isUnitTest(i)).map((i) => `${relative("src", file)} -> ${relative("src", i)}`));
  assert.deepEqual(found, []);
});
