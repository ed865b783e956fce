/**
 * The environment a program gets from its systemd unit in scripts/ (`Environment=A=1 B=2` lines,
 * e.g. glibc's malloc settings), so that benchmarks measure it as deployed; `--no-unit-env` on the
 * command line: none.
 */
import { readFileSync } from "node:fs";

export const unitEnvironment = (unit: "labgate.service" | "labgate-agent.service"): Record<string, string> =>
  process.argv.includes("--no-unit-env")
    ? {}
    : Object.fromEntries(
        [...readFileSync(new URL(`../${unit}`, import.meta.url), "utf8").matchAll(/^Environment=(.*)$/gm)].flatMap(([, list]) =>
          list
            .trim()
            .split(/\s+/)
            .map((pair) => [pair.slice(0, pair.indexOf("=")), pair.slice(pair.indexOf("=") + 1)]),
        ),
      );
