/**
 * Builds the web console (src/console/app) with esbuild: ES modules with code splitting (the
 * terminal is a chunk of its own, loaded when a terminal opens), one CSS file, and index.html
 * naming the hashed files. Used by the server when it runs from source (`npm start`, tests:
 * built in memory on the first request) and by build/build.sh, which writes dist/console for the
 * bundle and the single executable (src/console/build-cli.ts).
 */
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";

export interface ConsoleBuild {
  /** File name (no directory) to content; index.html is among them. */
  files: Map<string, Uint8Array>;
  /** Gzipped bytes of what the first page loads: index.html, its JS (entry and static chunks), its CSS. */
  firstPageGzip: number;
}

/** Served at /console/<name>; index.html at /. */
export const ASSET_PREFIX = "/console/";

type Esbuild = typeof import("esbuild");

let built: Promise<ConsoleBuild> | undefined;

/** The console, built once per process (its sources do not change while it runs). */
export function buildConsole(): Promise<ConsoleBuild> {
  return (built ??= build());
}

async function build(): Promise<ConsoleBuild> {
  // esbuild is a build tool (devDependency): required only here, never by the bundled server.
  const esbuild = createRequire(import.meta.url)("esbuild") as Esbuild;
  const appDir = fileURLToPath(new URL("./app/", import.meta.url));
  const result = await esbuild.build({
    absWorkingDir: appDir,
    entryPoints: { app: "./main.tsx", xterm: "@xterm/xterm/css/xterm.css" },
    bundle: true,
    splitting: true,
    format: "esm",
    target: ["chrome111", "firefox115", "safari16.4"],
    jsx: "automatic",
    jsxImportSource: "preact",
    minify: true,
    legalComments: "none",
    outdir: "/out",
    entryNames: "[name]-[hash]",
    chunkNames: "chunk-[hash]",
    assetNames: "[name]-[hash]",
    publicPath: ASSET_PREFIX,
    metafile: true,
    write: false,
    logLevel: "silent",
  });
  const files = new Map<string, Uint8Array>();
  for (const out of result.outputFiles) files.set(out.path.slice("/out/".length), out.contents);
  const outputs = Object.entries(result.metafile.outputs).map(([path, meta]) => ({ name: path.replace(/^.*\//, ""), meta }));
  const entry = (point: string, ext: string) => outputs.find((o) => o.meta.entryPoint?.endsWith(point) && o.name.endsWith(ext))!.name;
  const appJs = entry("main.tsx", ".js");
  const appCss = outputs.find((o) => o.name.startsWith("app-") && o.name.endsWith(".css"))!.name;
  const xtermCss = entry("xterm.css", ".css");
  const html = `<!doctype html>
<html lang="en" data-xterm-css="${ASSET_PREFIX}${xtermCss}">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>labgate</title>
<link rel="icon" href="data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 16 16'%3E%3Crect width='16' height='16' rx='3' fill='%232458d6'/%3E%3C/svg%3E">
<link rel="stylesheet" href="${ASSET_PREFIX}${appCss}">
<script type="module" src="${ASSET_PREFIX}${appJs}"></script>
</head>
<body><div id="app"></div></body>
</html>
`;
  files.set("index.html", new TextEncoder().encode(html));
  // What the first page loads: the entry, the chunks it imports statically, its CSS.
  const firstPage = new Set(["index.html", appJs, appCss]);
  const meta = (name: string) => outputs.find((o) => o.name === name)?.meta;
  for (const name of [...firstPage]) {
    for (const imported of meta(name)?.imports ?? []) if (imported.kind === "import-statement") firstPage.add(imported.path.replace(/^.*\//, ""));
  }
  const firstPageGzip = [...firstPage].reduce((sum, name) => sum + gzipSync(files.get(name)!, { level: 9 }).length, 0);
  return { files, firstPageGzip };
}
