import pkg from "../package.json" with { type: "json" };

export const VERSION: string = pkg.version;

// Set by build/build.sh (esbuild --define) in dist/labgate.cjs and the executables; absent when
// running from source.
declare const LABGATE_BUILD: { commit: string; date: string } | undefined;

/** What `labgate version` and the first log line of `serve` say about this program. */
export function buildInfo(): { version: string; commit: string; date: string; arch: string; node: string } {
  const build = typeof LABGATE_BUILD === "undefined" ? { commit: "source", date: "-" } : LABGATE_BUILD;
  return { version: VERSION, ...build, arch: `${process.platform}-${process.arch}`, node: process.version };
}

/** One line: `labgate 0.1.0 (commit 1a2b3c4d5e6f, built 2026-11-26T11:30:00Z, linux-arm64, node v24.21.0)`. */
export function describeBuild(): string {
  const b = buildInfo();
  return `labgate ${b.version} (commit ${b.commit}, built ${b.date}, ${b.arch}, node ${b.node})`;
}
