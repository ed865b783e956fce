import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parse } from "yaml";
import * as z from "zod";
import { describeExit } from "../../util/process.ts";
import { checkOutput, hasOutputChecks } from "./exec.ts";
import { ints, isMapping, num, paramSchema, str } from "./params.ts";
import { fail, pass, type CaseDef, type ModuleDef, type Params } from "./types.ts";

/** A module key that can name a script module file (`/` allowed for nested keys). */
export const SCRIPT_KEY = /^[A-Za-z0-9_][A-Za-z0-9_.-]*(?:\/[A-Za-z0-9_][A-Za-z0-9_.-]*)*$/;
const CASE_NAME = /^[A-Za-z0-9_]+$/;

export class ScriptModuleError extends Error {}

/** `{param}` in device names and messages is replaced by the param's value. */
const fill = (template: string, params: Params) => template.replace(/\{([A-Za-z0-9_]+)\}/g, (all, name: string) => (params[name] === undefined ? all : String(params[name])));

const paramEnv = (params: Params): Record<string, string> => {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(params)) {
    if (!/^[A-Za-z0-9_]+$/.test(k) || v === null || v === undefined) continue;
    env[`PARAM_${k.toUpperCase()}`] = typeof v === "object" ? JSON.stringify(v) : String(v);
  }
  return env;
};

/** The text of `DATA_DIR/testrun/modules/<key>.yaml`, or undefined when there is no such file (or `key` cannot name one). */
export function readScriptModule(dataDir: string, key: string): string | undefined {
  if (!SCRIPT_KEY.test(key) || key.split("/").some((s) => s === "." || s === "..")) return undefined;
  try {
    return readFileSync(join(dataDir, "testrun", "modules", `${key}.yaml`), "utf8");
  } catch {
    return undefined;
  }
}

/**
 * A declarative module from `DATA_DIR/testrun/modules/<key>.yaml`: each case is one
 * exec check with the entry's params exported as PARAM_<NAME>. Undefined when there is no file.
 */
export function loadScriptModule(dataDir: string, key: string): ModuleDef | undefined {
  const text = readScriptModule(dataDir, key);
  return text === undefined ? undefined : parseScriptModule(key, text);
}

/** A script module from its file's text (a device gets the text with its share of a run). */
export function parseScriptModule(key: string, text: string): ModuleDef {
  let doc: unknown;
  try {
    doc = parse(text);
  } catch (error) {
    throw new ScriptModuleError(`script module '${key}' is not valid YAML: ${(error as Error).message.split("\n")[0]}`);
  }
  const bad = (what: string): never => {
    throw new ScriptModuleError(`script module '${key}': ${what}`);
  };
  if (!isMapping(doc)) bad("expected a mapping");
  const d = doc as Record<string, unknown>;
  const className = typeof d.class === "string" && /^[A-Za-z_][A-Za-z0-9_]*$/.test(d.class) ? d.class : bad("'class' must be an identifier");
  const shape: Record<string, z.ZodType> = {};
  if (d.params !== undefined && d.params !== null) {
    if (!isMapping(d.params)) bad("'params' must be a mapping");
    for (const [name, spec] of Object.entries(d.params as Record<string, unknown>)) shape[name] = isMapping(spec) && spec.required === true ? z.unknown() : z.unknown().optional();
  }
  if (!Array.isArray(d.cases) || d.cases.length === 0) bad("'cases' must be a non-empty list");
  const cases: CaseDef[] = (d.cases as unknown[]).map((c, i) => {
    if (!isMapping(c)) return bad(`case ${i} must be a mapping`);
    const name = typeof c.name === "string" && CASE_NAME.test(c.name) ? c.name : bad(`case ${i}: 'name' must be made of letters, digits and _`);
    if (typeof c.command !== "string" && !(Array.isArray(c.command) && c.command.length > 0)) bad(`case ${name}: 'command' is required`);
    const check = c as Params;
    return {
      name,
      async run(ctx) {
        const timeout = num(check, "timeout", 60)!;
        const r = await ctx.exec({
          command: Array.isArray(check.command) ? check.command.map(String) : String(check.command),
          env: paramEnv(ctx.params),
          timeoutMs: timeout * 1000,
        });
        const custom = str(check, "fail_message");
        const accepted = ints(check, "expect_exit", [0]);
        const exitOk = r.exitCode !== null && accepted.includes(r.exitCode) && !r.timedOut;
        if (!exitOk) return fail(custom && !r.startError && !r.timedOut ? fill(custom, ctx.params) : describeExit(r, timeout * 1000));
        for (const stream of ["stdout", "stderr"] as const) {
          if (!hasOutputChecks(check, stream)) continue;
          const outcome = checkOutput(check, stream, stream === "stdout" ? r.stdout : r.stderr);
          if (outcome.status === "failed") return custom ? fail(fill(custom, ctx.params)) : outcome;
        }
        return pass();
      },
    };
  });
  const deviceName = typeof d.device_name === "string" ? d.device_name : key;
  return {
    key,
    className,
    params: paramSchema(() => shape),
    deviceName: ({ params: p }) => fill(deviceName, p),
    cases: () => cases,
  };
}
