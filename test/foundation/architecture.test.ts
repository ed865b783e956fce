// The house rules, read from the source: each table's SQL lives in its owner, the domain does not
// know HTTP, and folders do not import each other in a circle.
import { strict as assert } from "node:assert";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";
import { test } from "node:test";
import ts from "typescript";
import { TABLE_OWNERS } from "../../src/db/tables.ts";

const SRC = resolve("src");

/** Every server-side module under src/, relative to the repository (the console's browser app is another program). */
function sourceFiles(): string[] {
  const files: string[] = [];
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) {
        if (path !== join("src", "console", "app")) walk(path);
      } else if (/\.tsx?$/.test(entry.name)) files.push(path.split(sep).join("/"));
    }
  };
  walk("src");
  return files.sort();
}

/** The text of every string and template literal in a module, a template's substitutions read as `?`. */
function literals(file: string, code = readFileSync(file, "utf8")): { text: string; line: number }[] {
  const source = ts.createSourceFile(file, code, ts.ScriptTarget.Latest, true);
  const found: { text: string; line: number }[] = [];
  const visit = (node: ts.Node) => {
    let text: string | undefined;
    if (ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node)) text = node.text;
    else if (ts.isTemplateExpression(node)) text = node.head.text + node.templateSpans.map((s) => ` ? ${s.literal.text}`).join("");
    if (text !== undefined) found.push({ text, line: source.getLineAndCharacterOfPosition(node.getStart()).line + 1 });
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

// labgate writes SQL keywords in capitals, which tells a statement from prose ("update progress").
const STATEMENT = /^\s*\(?\s*(SELECT|INSERT|REPLACE|UPDATE|DELETE|WITH)\b/;
/** The table a statement writes, or the first it reads from. */
const PRIMARY = /\b(?:INSERT(?:\s+OR\s+\w+)?\s+INTO|REPLACE\s+INTO|UPDATE(?:\s+OR\s+\w+)?|DELETE\s+FROM|SELECT\b[\s\S]*?\bFROM)\s+([A-Za-z_]\w*)/;
/** Any table a piece of SQL names. */
const NAMED = /\b(?:FROM|JOIN|INTO|UPDATE)\s+([A-Za-z_]\w*)/g;

function migrationTables(): string[] {
  const tables = new Set<string>();
  for (const file of sourceFiles().filter((f) => f.startsWith("src/db/migrations/"))) {
    for (const { text } of literals(file)) for (const m of text.matchAll(/\bCREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)/gi)) tables.add(m[1]!);
  }
  return [...tables].sort();
}

const owns = (file: string, table: string) => file.startsWith(`${TABLE_OWNERS[table]}/`);
const isRoutes = (file: string) => /(^|\/)routes[^/]*\.tsx?$/.test(file) || file.includes("/routes/");

/** Statements outside their table's owner, and SQL of any table in a routes file. */
function misplacedSql(files: string[], read = (file: string) => readFileSync(file, "utf8")): string[] {
  const found: string[] = [];
  for (const file of files.filter((f) => !f.startsWith("src/db/migrations/"))) {
    for (const { text, line } of literals(file, read(file))) {
      if (isRoutes(file)) {
        for (const m of text.matchAll(NAMED)) if (m[1]! in TABLE_OWNERS) found.push(`${file}:${line} names ${m[1]} in a routes file`);
        continue;
      }
      if (!STATEMENT.test(text)) continue;
      const table = text.match(PRIMARY)?.[1];
      if (table && table in TABLE_OWNERS && !owns(file, table)) found.push(`${file}:${line} ${table} (owned by ${TABLE_OWNERS[table]})`);
    }
  }
  return found;
}

test("every table the migrations create has one owning module, which exists", () => {
  const tables = migrationTables();
  assert.ok(tables.length > 20, `found only ${tables.length} tables`);
  assert.deepEqual(tables.filter((t) => !(t in TABLE_OWNERS)), []);
  const modules = new Set(sourceFiles().map((f) => dirname(f)));
  assert.deepEqual([...new Set(Object.values(TABLE_OWNERS))].filter((m) => !modules.has(m)), []);
});

test("SQL of a table lives only in its owning module (a statement belongs to the table it writes or reads first), and routes hold none", () => {
  const found = misplacedSql(sourceFiles());
  assert.deepEqual(found, [], `SQL outside its owner:\n  ${found.join("\n  ")}`);
});

test("the SQL finder finds a statement outside its owner, a routes file's filter, and lets an owner join another table", () => {
  const code: Record<string, string> = {
    "src/update/channel/progress.ts": [
      'db.get("SELECT metadata FROM devices WHERE id = ?", [id]);',
      "tx.run(`UPDATE devices SET metadata = ? WHERE id = ${id}`);",
      'log.warn("an update from the device was ignored");',
    ].join("\n"),
    "src/update/devices/routes.ts": 'const filter = { sql: "EXISTS (SELECT 1 FROM device_tags t WHERE t.device_id = d.id)" };',
    "src/update/devices/devices.ts": 'db.all(`SELECT d.id FROM devices d JOIN group_devices gd ON gd.device_id = d.id WHERE ${where}`);',
  };
  assert.deepEqual(misplacedSql(Object.keys(code), (file) => code[file]!), [
    "src/update/channel/progress.ts:1 devices (owned by src/update/devices)",
    "src/update/channel/progress.ts:2 devices (owned by src/update/devices)",
    "src/update/devices/routes.ts:1 names device_tags in a routes file",
  ]);
});

/**
 * Domain modules are everything under src/ but the HTTP and process edges: src/http (the HTTP
 * layer), src/server and src/app (composition roots that build the apps), src/cli and src/main.ts
 * (the command line), src/console (the console's server and pages), and routes files (routes*.ts and
 * files under a routes/ folder), which turn HTTP into domain calls. Three more files are HTTP by
 * what they do: the authentication middleware (src/auth/middleware.ts), the file answer
 * (src/storage/send.ts) and the hub's socket wiring (src/update/channel/hub.ts, WebSocket through
 * hono's adapter).
 */
const EDGE_FILES = new Set(["src/main.ts", "src/auth/middleware.ts", "src/storage/send.ts", "src/update/channel/hub.ts"]);
function isDomain(file: string): boolean {
  if (["src/http/", "src/server/", "src/app/", "src/cli/", "src/console/"].some((edge) => file.startsWith(edge))) return false;
  return !EDGE_FILES.has(file) && !isRoutes(file);
}

function imports(file: string): string[] {
  return ts.preProcessFile(readFileSync(file, "utf8"), true, true).importedFiles.map((i) => i.fileName);
}

test("no domain module imports hono, @hono/* or src/http", () => {
  const http = join(SRC, "http");
  const found = sourceFiles()
    .filter(isDomain)
    .flatMap((file) =>
      imports(file)
        .filter((i) => i === "hono" || i.startsWith("hono/") || i.startsWith("@hono/") || (i.startsWith(".") && `${resolve(dirname(file), i)}`.startsWith(`${http}${sep}`)))
        .map((i) => `${file} -> ${i}`),
    );
  assert.deepEqual(found, []);
});

/** Which module a file imports each of its folder's neighbours through, for the message. */
function folderGraph(files: string[]): { graph: Map<string, Set<string>>; via: Map<string, string> } {
  const graph = new Map<string, Set<string>>();
  const via = new Map<string, string>();
  for (const file of files) {
    const from = dirname(file);
    if (!graph.has(from)) graph.set(from, new Set());
    for (const i of imports(file).filter((i) => i.startsWith("."))) {
      const to = relative(process.cwd(), dirname(resolve(dirname(file), i))).split(sep).join("/");
      if (to === from || !to.startsWith("src/")) continue;
      graph.get(from)!.add(to);
      if (!via.has(`${from} ${to}`)) via.set(`${from} ${to}`, `${file} -> ${i}`);
    }
  }
  return { graph, via };
}

/** Two folders that import each other, neither holding the other (a parent folder is its children's area: its composition root imports them, they import its shared modules). */
function mutualFolders(graph: Map<string, Set<string>>): string[] {
  const nested = (a: string, b: string) => a.startsWith(`${b}/`) || b.startsWith(`${a}/`);
  const found: string[] = [];
  for (const [a, targets] of graph) for (const b of targets) if (a < b && !nested(a, b) && graph.get(b)?.has(a)) found.push(`${a} <-> ${b}`);
  return found.sort();
}

/**
 * The HTTP edge (isDomain) is left out of the graph: a routes file or src/http sits above every
 * domain and may import any of them.
 */
test("no two domain folders import each other (type imports included): of any two, one can be read without the other", () => {
  const { graph, via } = folderGraph(sourceFiles().filter((f) => isDomain(f) || f === "src/update/channel/hub.ts"));
  const found = mutualFolders(graph).map((pair) => {
    const [a, b] = pair.split(" <-> ") as [string, string];
    return `${pair}\n    ${via.get(`${a} ${b}`)}\n    ${via.get(`${b} ${a}`)}`;
  });
  assert.deepEqual(found, [], `folders that import each other:\n  ${found.join("\n  ")}`);
});

test("the mutual import finder finds two folders importing each other, not a parent and its child", () => {
  const graph = new Map([["src/a", new Set(["src/b", "src/a/x"])], ["src/b", new Set(["src/a"])], ["src/a/x", new Set(["src/a"])], ["src/c", new Set(["src/a"])]]);
  assert.deepEqual(mutualFolders(graph), ["src/a <-> src/b"]);
});
