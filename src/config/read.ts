/*
 * Reading a config file without zod's classic API, which would be most of an idle agent's
 * memory (src/agent/config.ts reads with zod/mini): the errors that name a key, and the YAML file's
 * top-level mapping. ./schema.ts builds the server's schemas on them.
 */
import { readFileSync } from "node:fs";
import { parse as parseYaml } from "yaml";
import type { $ZodIssue } from "zod/v4/core";
import { ConfigError } from "../util/config-error.ts";

export { ConfigError };

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

/**
 * The ConfigError of a failed zod parse (classic or zod/mini): the first key that does not fit,
 * an unknown key before a bad value; `name(path)` turns the key's path into what the message calls it.
 */
export function configError(issues: readonly $ZodIssue[], name: (path: Array<PropertyKey>) => string): ConfigError {
  const unknownKey = issues.find((i) => i.code === "unrecognized_keys");
  const issue = unknownKey ?? issues[0]!;
  const path = issue.code === "unrecognized_keys" ? [...issue.path, issue.keys[0]!] : issue.path;
  return new ConfigError(`${name(path)}: ${issue.code === "unrecognized_keys" ? "unknown key" : issue.message}`);
}

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
