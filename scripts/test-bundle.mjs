// Bundles test files for node:test: one esbuild pass, shared chunks, into .test-build/.
//
// Why: Node 20 runs TypeScript only through tsx's loader hooks, and every module a test file loads
// (about 300 for one that starts a server, node_modules included) crosses those hooks on another
// thread: 1.5 to 2.5 s of CPU per file, a third of the suite's CPU. A bundle loads as plain JS.
// `import.meta.url` and `import.meta.dirname` keep the source file's values, so what the code finds
// beside its source (assets, fixtures, the console's app/, the checkpoint worker) is found as before.
import { readFile, rm } from "node:fs/promises";
import { dirname, join, relative } from "node:path";
import { pathToFileURL } from "node:url";
import { build } from "esbuild";

export const OUT_DIR = ".test-build";

/** esbuild plugin: our own .ts/.tsx files keep their source location in import.meta. */
const sourceLocation = {
  name: "source-location",
  setup(b) {
    b.onLoad({ filter: /\.tsx?$/ }, async (args) => {
      if (args.path.includes("/node_modules/")) return undefined;
      const text = await readFile(args.path, "utf8");
      return {
        contents: text.replaceAll("import.meta.url", JSON.stringify(pathToFileURL(args.path).href)).replaceAll("import.meta.dirname", JSON.stringify(dirname(args.path))),
        loader: args.path.endsWith(".tsx") ? "tsx" : "ts",
      };
    });
  },
};

/** Bundles `files` (paths relative to `root`) and returns the bundles' paths, in the same order. */
export async function bundleTests(root, files) {
  const outdir = join(root, OUT_DIR);
  await rm(outdir, { recursive: true, force: true });
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
    logLevel: "warning",
    sourcemap: "linked",
  });
  return files.map((file) => join(OUT_DIR, relative(".", file)).replace(/\.tsx?$/, ".mjs"));
}
