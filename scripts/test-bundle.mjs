// Bundles test files for node:test: one esbuild pass, shared chunks, into .tmp/test-files/.
//
// Why: Node 20 runs TypeScript only through tsx's loader hooks, and every module a test file loads
// (about 300 for one that starts a server, node_modules included) crosses those hooks on another
// thread: 1.5 to 2.5 s of CPU per file, a third of the suite's CPU. A bundle loads as plain JS.
// `import.meta.url` and `import.meta.dirname` keep the source file's values, so what the code finds
// beside its source (assets, fixtures, the console's app/, the checkpoint worker) is found as before.
import { readdir, readFile, rm } from "node:fs/promises";
import { dirname, join, relative } from "node:path";
import { pathToFileURL } from "node:url";
import { build } from "esbuild";

export const OUT_DIR = ".tmp/test-files";

/**
 * esbuild plugin: our own .ts/.tsx files keep their source location in import.meta. Each gets
 * its own constants (on its first line, so that source maps stay right), which `define` puts
 * where the code reads import.meta.url or import.meta.dirname; a string that merely names them is left alone.
 */
const sourceLocation = {
  name: "source-location",
  setup(b) {
    b.onLoad({ filter: /\.tsx?$/ }, async (args) => {
      if (args.path.includes("/node_modules/")) return undefined;
      const text = await readFile(args.path, "utf8");
      const location = `const __sourceUrl = ${JSON.stringify(pathToFileURL(args.path).href)}, __sourceDir = ${JSON.stringify(dirname(args.path))};`;
      return { contents: location + text, loader: args.path.endsWith(".tsx") ? "tsx" : "ts" };
    });
  },
};

/** Whether process `pid` still runs. */
function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return error.code === "EPERM";
  }
}

/**
 * Bundles `files` (paths relative to `root`) into a directory of this run's own (runs may overlap
 * in one checkout) and returns the bundles' paths, in the same order, and a function that removes
 * them. Directories left by runs that were killed go too.
 */
export async function bundleTests(root, files) {
  const base = join(root, OUT_DIR);
  const runs = await readdir(base).catch(() => []);
  await Promise.all(runs.filter((name) => /^\d+$/.test(name) && !alive(Number(name))).map((name) => rm(join(base, name), { recursive: true, force: true })));
  const outdir = join(base, String(process.pid));
  await build({
    absWorkingDir: root,
    entryPoints: files,
    outdir,
    outbase: ".",
    outExtension: { ".js": ".mjs" },
    chunkNames: "chunks/[name]-[hash]",
    bundle: true,
    splitting: true,
    format: "esm",
    platform: "node",
    target: "node20",
    // Packages load from node_modules as they are: only our own source needs the transform.
    packages: "external",
    jsx: "automatic",
    jsxImportSource: "preact",
    plugins: [sourceLocation],
    define: { "import.meta.url": "__sourceUrl", "import.meta.dirname": "__sourceDir" },
    logLevel: "warning",
    sourcemap: "linked",
  });
  return {
    paths: files.map((file) => join(outdir, relative(".", file)).replace(/\.tsx?$/, ".mjs")),
    remove: () => rm(outdir, { recursive: true, force: true }),
  };
}
