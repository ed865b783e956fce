/*
 * What the agent's bundles are built with beside the common options (build/build.sh, and the tests'
 * bundles):
 * - ws requires tls, https and zlib at its top level, and an agent of an http:// gateway uses none
 *   of them (labgate's server turns permessage-deflate down), so each is replaced by a stand-in
 *   (./lazy/) that loads the module on first use; so are node:fs/promises and
 *   node:child_process, which an idle agent does not use either.
 * - LABGATE_AGENT_BUNDLE is defined: the agent's parts (./parts.ts: its config reader, its
 *   test-run engine) are then bundles of their own, loaded when needed.
 *
 *   node --import tsx src/agent/bundle.ts     prints them as esbuild flags
 */
import { relative } from "node:path";
import { fileURLToPath } from "node:url";

const lazy = (file: string) => fileURLToPath(new URL(`./lazy/${file}`, import.meta.url));
export const AGENT_ALIASES: Record<string, string> = {
  ...Object.fromEntries(["tls", "https", "zlib"].map((name) => [name, lazy(`${name}.cjs`)])),
  "node:fs/promises": lazy("fs-promises.ts"),
  "node:child_process": lazy("child-process.ts"),
};
export const AGENT_DEFINE: Record<string, string> = { LABGATE_AGENT_BUNDLE: "true" };

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const aliases = Object.entries(AGENT_ALIASES).map(([name, path]) => `--alias:${name}=./${relative(process.cwd(), path)}`);
  const defines = Object.entries(AGENT_DEFINE).map(([name, value]) => `--define:${name}=${value}`);
  console.log([...aliases, ...defines].join(" "));
}
