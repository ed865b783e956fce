import { execModule } from "./exec.ts";
import { extendedSimpleModule, simpleModule } from "./compat.ts";
import { fileModule } from "./file.ts";
import { httpModule } from "./http.ts";
import { junitModule } from "./junit.ts";
import { checkParams } from "./params.ts";
import { pingModule } from "./ping.ts";
import { loadScriptModule, parseScriptModule, ScriptModuleError } from "./script.ts";
import { sleepModule } from "./sleep.ts";
import { tcpModule } from "./tcp.ts";
import type { ModuleDef, Params } from "./types.ts";

const BUILTIN: ReadonlyMap<string, ModuleDef> = new Map(
  [execModule, junitModule, httpModule, tcpModule, pingModule, fileModule, sleepModule, simpleModule, extendedSimpleModule].map((m) => [m.key, m]),
);

export interface ModuleLookup {
  /** `test_server.compat_modules`: offer `simple` and `extended_simple`. */
  compat: boolean;
  dataDir: string;
  /** Script modules given as text (a device's share of a run): used instead of the data dir's files. */
  scripts?: Record<string, string>;
}

/** Whether `key` names a built-in module (anything else is a script module file). */
export const isBuiltinModule = (key: string): boolean => BUILTIN.has(key);

/** The module for a key: built-in first, then a script module file. Throws ScriptModuleError for a broken file. */
export function findModule(key: string, lookup: ModuleLookup): ModuleDef | undefined {
  const builtin = BUILTIN.get(key);
  if (builtin) return builtin.compat && !lookup.compat ? undefined : builtin;
  if (lookup.scripts) return Object.hasOwn(lookup.scripts, key) ? parseScriptModule(key, lookup.scripts[key]) : undefined;
  return loadScriptModule(lookup.dataDir, key);
}

export interface ResolvedEntry {
  module: ModuleDef;
  warnings: string[];
}

/** Resolves and validates an entry's module and params; `where` is the plan entry's (`tests.g.0.exec`). Errors are a 422 at trigger. */
export function resolveEntry(where: string, key: string, params: Params, lookup: ModuleLookup): ResolvedEntry | { error: string } {
  let module: ModuleDef | undefined;
  try {
    module = findModule(key, lookup);
  } catch (error) {
    if (error instanceof ScriptModuleError) return { error: `${where}: ${error.message}` };
    throw error;
  }
  if (!module) return { error: `${where}: unknown module '${key}'` };
  const check = checkParams(module, params);
  if (check.error) return { error: `${where}: ${check.error}` };
  return { module, warnings: check.unknown.map((name) => `${where}: unknown parameter '${name}' ignored`) };
}
