import { blockDeviceModule, mmcModule } from "./block.ts";
import { cameraModule } from "./camera.ts";
import { execModule } from "./exec.ts";
import { extendedSimpleModule, simpleModule } from "./compat.ts";
import { fileModule } from "./file.ts";
import { fpgaModule } from "./fpga.ts";
import { gpioModule } from "./gpio.ts";
import { httpModule } from "./http.ts";
import { i2cModule, i2cRegistersModule } from "./i2c.ts";
import { adcModule, dacModule } from "./iio.ts";
import { junitModule } from "./junit.ts";
import { memtesterModule } from "./memtester.ts";
import { networkModule } from "./network.ts";
import { pingModule } from "./ping.ts";
import { powerModule } from "./power.ts";
import { loadScriptModule, parseScriptModule, ScriptModuleError } from "./script.ts";
import { sleepModule } from "./sleep.ts";
import { spiModule } from "./spi.ts";
import { tcpModule } from "./tcp.ts";
import { thermalModule } from "./thermal.ts";
import { usbdevModule } from "./usbdev.ts";
import type { ModuleDef, Params } from "./types.ts";

/** Params every entry may carry: `override` hints stay in the params and are ignored. */
// `name` is every entry's own name in the report (plan.ts entryName), whatever its module.
const COMMON_IGNORED = new Set(["override", "name"]);

/** Every built-in module, in the order docs/modules.md lists them. */
export const BUILTIN_MODULES: readonly ModuleDef[] = [
  execModule,
  junitModule,
  httpModule,
  tcpModule,
  pingModule,
  fileModule,
  sleepModule,
  powerModule,
  // Hardware (hardware.ts): protoplaster's module keys and parameters.
  networkModule,
  usbdevModule,
  adcModule,
  dacModule,
  thermalModule,
  mmcModule,
  blockDeviceModule,
  gpioModule,
  i2cModule,
  i2cRegistersModule,
  spiModule,
  cameraModule,
  memtesterModule,
  fpgaModule,
  simpleModule,
  extendedSimpleModule,
];
const BUILTIN: ReadonlyMap<string, ModuleDef> = new Map(BUILTIN_MODULES.map((m) => [m.key, m]));

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

export interface ParamCheck {
  error?: string;
  /** Unknown params, for the run's warnings (ignored with a warning). */
  unknown: string[];
}

/** Validates an entry's params against the module's schema (at trigger: errors are a 422). A null value counts as absent. */
export function checkParams(module: ModuleDef, params: Params): ParamCheck {
  const schema = module.params.object;
  const shape = schema.shape;
  const unknown = Object.keys(params).filter((k) => !(k in shape) && !COMMON_IGNORED.has(k));
  const given = Object.fromEntries(Object.entries(params).filter(([k, v]) => k in shape && v !== undefined && v !== null));
  const parsed = schema.safeParse(given);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const name = issue.path.map(String).join(".");
    return { error: given[String(issue.path[0])] === undefined ? `parameter '${name}' is required` : `parameter '${name}': ${issue.message}`, unknown };
  }
  const extra = module.validate?.(params);
  return extra ? { error: extra, unknown } : { unknown };
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
