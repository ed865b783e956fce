import { test } from "node:test";
import { Database } from "../../src/db/index.ts";
import { migrate } from "../../src/db/migrate.ts";
import { migrations } from "../../src/db/migrations/index.ts";
import { TABLE_OWNERS } from "../../src/db/tables.ts";
import { checkGeneratedDoc } from "../helpers/generated-doc.ts";
import { removeDir, tempDir } from "../helpers/server.ts";

const FILE = "src/db/schema.ts";
const REGENERATE = "npm run db-schema";

interface Column {
  name: string;
  type: string;
  notnull: number;
  dflt_value: string | null;
  pk: number;
}

const TS_TYPES: Record<string, string> = { INTEGER: "number", REAL: "number", TEXT: "string", BLOB: "Uint8Array" };

/** A column's row type as Kysely reads it: `Generated` when an insert may leave it out (identity ids, defaults). */
function columnType(table: string, column: Column, rowid: boolean): string {
  const base = TS_TYPES[column.type.toUpperCase()];
  if (!base) throw new Error(`${table}.${column.name}: no row type for the SQL type ${column.type}`);
  const type = column.notnull || column.pk ? base : `${base} | null`;
  return (column.pk && rowid) || column.dflt_value !== null ? `Generated<${type}>` : type;
}

test(`${FILE} holds the row type of every table, written from the migrations (${REGENERATE} rewrites it)`, async () => {
  const dir = tempDir();
  const db = await Database.open(dir);
  try {
    await migrate(db, migrations);
    const tables = db.all<{ name: string; sql: string }>("SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name");
    const interfaces: string[] = [];
    const entries: string[] = [];
    for (const { name, sql } of tables) {
      const columns = db.all<Column>(`SELECT name, type, "notnull", dflt_value, pk FROM pragma_table_info(?)`, [name]);
      // A single INTEGER PRIMARY KEY is the rowid: an insert may leave it out (AUTOINCREMENT or not).
      const keys = columns.filter((c) => c.pk > 0);
      const rowid = keys.length === 1 && keys[0]!.type.toUpperCase() === "INTEGER" && !/WITHOUT ROWID/i.test(sql);
      const typeName = name.replace(/(^|_)([a-z])/g, (_, __, c: string) => c.toUpperCase()).replace(/^_+/, "") + "Table";
      const owner = TABLE_OWNERS[name] ?? "src/db";
      interfaces.push(
        `/** \`${name}\`, owned by ${owner}. */\nexport interface ${typeName} {\n${columns.map((c) => `  ${/^[a-z_][a-z0-9_]*$/.test(c.name) ? c.name : JSON.stringify(c.name)}: ${columnType(name, c, rowid)};`).join("\n")}\n}\n`,
      );
      entries.push(`  ${name}: ${typeName};`);
    }
    const text = [
      `/*`,
      ` * Every table's columns, as the numbered migrations leave them (Kysely's table types: a row read is`,
      ` * \`Selectable<XTable>\`, one written \`Insertable<XTable>\`): written by ${REGENERATE} from`,
      ` * the embedded schema (test/foundation/db-schema.test.ts fails when it is stale), so a migration`,
      ` * and the types that query the table cannot disagree. Both engines have these columns.`,
      ` */`,
      `import type { Generated } from "kysely";`,
      ``,
      ...interfaces,
      `/** Every table, as the query layer (Kysely) is typed. */`,
      `export interface Tables {`,
      ...entries,
      `}`,
      ``,
    ].join("\n");
    checkGeneratedDoc(FILE, text, "UPDATE_DB_SCHEMA", REGENERATE);
  } finally {
    await db.close();
    removeDir(dir);
  }
});
