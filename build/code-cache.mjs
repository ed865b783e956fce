// Makes V8's code cache of a bundle by running it, as src/launch/launch.ts will in the executable:
// the cache then holds the functions that run (a start's), not only the top level that a compile
// alone yields. Run by the target's own Node 24 with the executable's flags (V8 refuses a cache
// made by another version or other flags); an arm64 one under qemu.
//
//   NODE FLAGS... build/code-cache.mjs BUNDLE OUT (--until URL | --for MS) -- ARGS...
//
// `{port}` in URL and ARGS is a free port of 127.0.0.1. The bundle runs with ARGS; once URL
// answers 200 (or after MS), the cache goes to OUT and the program gets SIGTERM, to stop as it does.
import { readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { createRequire } from "node:module";
import { basename, resolve } from "node:path";
import { compileBundle } from "../src/launch/bundles.ts";

const [bundle, out, how, value, dashes, ...rest] = process.argv.slice(2);
if (!out || !["--until", "--for"].includes(how) || dashes !== "--") {
  console.error("usage: code-cache.mjs BUNDLE OUT (--until URL | --for MS) -- ARGS...");
  process.exit(2);
}
const port = await new Promise((done) => {
  const server = createServer().listen(0, "127.0.0.1", () => {
    const { port } = server.address();
    server.close(() => done(port));
  });
});
const fill = (text) => text.replaceAll("{port}", String(port));
const path = resolve(bundle);
const { script, run } = compileBundle(readFileSync(path, "utf8"), basename(path));
process.argv = [process.execPath, path, ...rest.map(fill)];
run(createRequire(path), path);

if (how === "--for") await new Promise((r) => setTimeout(r, Number(value)));
else {
  const url = fill(value);
  const started = Date.now();
  for (;;) {
    const status = await fetch(url).then((res) => res.status, () => 0);
    if (status === 200) break;
    if (Date.now() - started > 600_000) throw new Error(`code-cache.mjs: ${url} did not answer 200 in 10 minutes`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
writeFileSync(out, script.createCachedData());
console.error(`code-cache.mjs: ${out} ${readFileSync(out).length} bytes`);
process.kill(process.pid, "SIGTERM");
