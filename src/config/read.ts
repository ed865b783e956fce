/*
 * Reading a config file without zod (the agent's config reads with these alone, src/agent/config.ts:
 * zod would be about a fifth of an idle agent's memory): the errors that name a key, and the YAML
 * file's top-level mapping. ./schema.ts builds the server's schemas on them.
 */
import { readFileSync } from "node:fs";
import { parse as parseYaml } from "yaml";

/** A bad config file, flag or environment value; the CLI exits with code 2 and this message. */
export class ConfigError extends Error {}

/** A value that does not fit its key: `what` is wrong, at `path` below the key being read. */
export class Problem extends Error {
  readonly what: string;
  readonly path: Array<string | number>;
  constructor(what: string, path: Array<string | number> = []) {
    super(what);
    this.what = what;
    this.path = path;
  }
}

export const shown = (value: unknown) => JSON.stringify(value);

/** Reads a YAML file whose top level must be a mapping (empty: `{}`); `what` names it in messages. */
export function readYamlMapping(path: string, what: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (error) {
    throw new ConfigError(`cannot read ${what} ${path}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`);
  }
  let raw: unknown;
  try {
    raw = parseYaml(text) ?? {};
  } catch (error) {
    throw new ConfigError(`${what} ${path} is not valid YAML: ${(error as Error).message.split("\n")[0]}`);
  }
  if (typeof raw !== "object" || Array.isArray(raw)) throw new ConfigError(`${what} ${path}: expected a mapping at the top level`);
  return raw as Record<string, unknown>;
}
