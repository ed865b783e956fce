/** `node --import tsx src/console/build-cli.ts DIR`: writes the built console into DIR (emptied first). */
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { buildConsole } from "./build.ts";

const dir = process.argv[2] ?? "dist/console";
const { files, firstPageGzip } = await buildConsole();
rmSync(dir, { recursive: true, force: true });
mkdirSync(dir, { recursive: true });
for (const [name, body] of files) writeFileSync(join(dir, name), body);
console.log(`console: ${files.size} files in ${dir}; first page ${(firstPageGzip / 1024).toFixed(1)} KB gzipped (HTML + JS + CSS, limit 150 KB)`);
if (firstPageGzip > 150 * 1024) {
  console.error("console: the first page is over 150 KB gzipped");
  process.exit(1);
}
