/**
 * From a loaded config to a run plan, plus the
 * two read views of a config: its suites and its override hints.
 */
import { PlanError, numberEntries, type ConfigSource, type MetadataCommand, type PlanEntry, type PlanRequest, type TestPlan } from "../plan.ts";
import { isConfigName, isSafeFileName } from "./names.ts";
import { deepMerge, OverrideError, parseOverrideString, type Override } from "./overrides.ts";
import { loadConfigFiles, LoadError, type LoadResult } from "./loader.ts";
import { Budget, fromPlain, isContainer, isYMap, keyText, toPlain, YamlError, type YMap, type YValue } from "./yaml.ts";

/** A config's problem found while checking its meaning: 422, or 400 after an object-form merge. */
class ConfigInvalid extends Error {}

interface Group {
  name: string;
  entries: Array<Omit<PlanEntry, "paramId"> & { rawParams: YMap | null }>;
}

interface Suite {
  tests: string[];
  metadata: string[];
}

/** The effective config, checked. */
interface Model {
  groups: Map<string, Group>;
  suites: Map<string, Suite>;
  metadata: MetadataCommand[];
  aggregateResults: boolean;
  combinedResultsDirPrefix: string;
}

const invalid = (message: string): never => {
  throw new ConfigInvalid(message);
};

function machinesOf(value: YValue | undefined, where: string): string[] | undefined {
  if (value === undefined || value === null) return undefined;
  const list = Array.isArray(value) ? value : [value];
  return list.map((m) => (typeof m === "string" && m !== "" ? m : invalid(`${where}: machines must be a machine name or a list of names`)));
}

function nameList(value: YValue | undefined, where: string): string[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) return invalid(`${where} must be a list of names`);
  return value.map((v) => (isContainer(v) ? invalid(`${where} must be a list of names`) : keyText(v)));
}

/** Checks the effective view `{tests, metadata, test-suites, ...}`. */
function checkModel(view: YMap): Model {
  const section = (key: string): YMap => {
    const value = view.get(key);
    if (value === undefined || value === null) return new Map();
    return isYMap(value) ? value : invalid(`'${key}' must be a mapping`);
  };

  const groups = new Map<string, Group>();
  for (const [key, value] of section("tests")) {
    const name = keyText(key);
    const at = `tests.${name}`;
    if (key === "override") invalid(`${at}: an override hint cannot be placed directly under 'tests'`);
    let items: YValue[];
    let groupMachines: string[] | undefined;
    if (value === null) items = [];
    else if (Array.isArray(value)) items = value;
    else if (isYMap(value)) {
      const list = value.get("tests");
      if (list !== undefined && list !== null && !Array.isArray(list)) invalid(`${at}.tests must be a list of entries`);
      items = (list as YValue[] | null | undefined) ?? [];
      groupMachines = machinesOf(value.get("machines"), `${at}.machines`);
    } else {
      return invalid(`${at}: a group must be a list of entries or a mapping with 'tests'`);
    }
    const entries: Group["entries"] = [];
    items.forEach((item, i) => {
      const where = `${at}.${i}`;
      if (!isYMap(item) || item.size === 0) invalid(`${where}: an entry must be a mapping of module name to parameters`);
      for (const [moduleKey, params] of item as YMap) {
        if (moduleKey === "override") invalid(`${where}: an override hint cannot be placed beside a module key`);
        if (typeof moduleKey !== "string" || moduleKey === "") invalid(`${where}: module name must be a string, got ${keyText(moduleKey)}`);
        const module = moduleKey as string;
        if (params !== null && !isYMap(params)) invalid(`${where}.${module}: parameters must be a mapping`);
        const own = machinesOf(isYMap(params) ? params.get("machines") : undefined, `${where}.${module}.machines`);
        if (own && groupMachines) invalid(`${where}.${module}: machines defined in both group and test`);
        entries.push({ group: name, index: entries.length, where: `${where}.${module}`, module, params: {}, machines: own ?? groupMachines ?? [], rawParams: params as YMap | null });
      }
    });
    groups.set(name, { name, entries });
  }

  const suites = new Map<string, Suite>();
  for (const [key, value] of section("test-suites")) {
    const name = keyText(key);
    const at = `test-suites.${name}`;
    if (groups.has(name)) invalid(`test-suite '${name}' conflicts with test group '${name}'`);
    if (value !== null && !isYMap(value)) invalid(`${at} must be a mapping with 'tests' and 'metadata'`);
    const map = (value ?? new Map()) as YMap;
    suites.set(name, { tests: nameList(map.get("tests"), `${at}.tests`), metadata: nameList(map.get("metadata"), `${at}.metadata`) });
  }

  const metadata: MetadataCommand[] = [];
  for (const [key, value] of section("metadata")) {
    const name = keyText(key);
    const at = `metadata '${name}'`;
    if (!isSafeFileName(name)) invalid(`${at}: the name must be a safe file name ([A-Za-z0-9._-], not starting with '.')`);
    if (!isYMap(value)) return invalid(`${at}: expected a mapping with 'run'`);
    const run = value.get("run");
    if (typeof run !== "string" || run.trim() === "") invalid(`${at}: 'run' is required and must be a string`);
    const superuser = value.get("superuser") ?? null;
    if (superuser !== null && superuser !== "required" && superuser !== "preferred") invalid(`${at}: superuser must be 'required' or 'preferred'`);
    let onFail: MetadataCommand["onFail"] = null;
    const fallback = value.get("on-fail");
    if (fallback !== undefined && fallback !== null) {
      if (!isYMap(fallback)) return invalid(`${at}: on-fail must be a mapping with 'run'`);
      const fallbackRun = fallback.get("run");
      if (typeof fallbackRun !== "string" || fallbackRun.trim() === "") invalid(`${at}: on-fail needs 'run'`);
      const output = fallback.get("output");
      onFail = { run: fallbackRun as string, output: typeof output === "string" ? output : name };
    }
    metadata.push({ name, run: run as string, onFail, superuser: superuser as MetadataCommand["superuser"] });
  }

  const aggregate = view.get("aggregate_results");
  const prefix = view.get("combined_results_dir_prefix");
  if (prefix !== undefined && prefix !== null && (typeof prefix !== "string" || !/^[A-Za-z0-9._-]{0,64}$/.test(prefix) || prefix.startsWith(".")))
    invalid("combined_results_dir_prefix must be a short safe file name prefix");
  return { groups, suites, metadata, aggregateResults: aggregate === true, combinedResultsDirPrefix: typeof prefix === "string" ? prefix : "combined_" };
}

/** The effective config as one mapping: the main file's keys with the merged sections. */
function effectiveView(loaded: LoadResult): YMap {
  const view: YMap = new Map(loaded.root);
  view.set("tests", loaded.tests);
  view.set("metadata", loaded.metadata);
  view.set("test-suites", loaded.suites);
  view.delete("includes");
  return view;
}

/** Expands a suite to its groups, recursively, first occurrence wins, order-independent. */
function expandSuite(model: Model, name: string, warnings: string[]): string[] {
  const out = new Set<string>();
  const walk = (suite: string, stack: string[]) => {
    if (stack.length > 256) invalid(`test-suite '${name}' nests more than 256 levels`);
    for (const member of model.suites.get(suite)!.tests) {
      if (model.groups.has(member)) {
        out.add(member);
      } else if (model.suites.has(member)) {
        if (stack.includes(member)) warnings.push(`test-suite '${suite}': include cycle through '${member}' skipped`);
        else walk(member, [...stack, member]);
      } else {
        warnings.push(`test-suite '${suite}': unknown test or suite '${member}' skipped`);
      }
    }
  };
  walk(name, [name]);
  return [...out];
}

function load(source: ConfigSource, configName: string, overrides: Override[] = []): LoadResult {
  if (!isConfigName(configName)) throw new PlanError("bad_config_name", "invalid config name");
  try {
    return loadConfigFiles(source, configName, overrides);
  } catch (error) {
    if (error instanceof LoadError) throw new PlanError(error.missing ? "config_missing" : "invalid_config", error.message, error.at);
    throw error;
  }
}

const wrap = <T>(fn: () => T, problem: "invalid_config" | "invalid_overrides", prefix = ""): T => {
  try {
    return fn();
  } catch (error) {
    if (error instanceof ConfigInvalid || error instanceof YamlError || error instanceof OverrideError) throw new PlanError(problem, prefix + error.message, error instanceof YamlError ? error.at : undefined);
    if (error instanceof RangeError) throw new PlanError(problem, `${prefix}the config nests too deeply`);
    throw error;
  }
};

/**
 * Loads `request.configName` from `source` (includes, anchors, in-file and request overrides),
 * selects the suite or group, filters by machine target and numbers the entries.
 * Throws PlanError: 404 config missing / unknown suite, 400 bad overrides or name, 422 invalid config.
 */
export function buildPlan(source: ConfigSource, request: PlanRequest): TestPlan {
  const warnings: string[] = [];

  // Request overrides: a string is path overrides, an object a deep-merge patch.
  let pathOverrides: Override[] = [];
  let patch: YValue | undefined;
  let recorded: TestPlan["overrides"] = null;
  const given = request.overrides;
  if (typeof given === "string") {
    const parsed = wrap(() => parseOverrideString(given), "invalid_overrides", "invalid overrides: ");
    pathOverrides = parsed.overrides;
    recorded = parsed.lines;
  } else if (given !== null && given !== undefined) {
    if (typeof given !== "object" || Array.isArray(given)) throw new PlanError("invalid_overrides", "invalid overrides: expected a string or an object");
    patch = wrap(() => fromPlain(given), "invalid_overrides", "invalid overrides: ");
    recorded = given;
  }

  const loaded = load(source, request.configName, pathOverrides);
  for (const o of loaded.unconsumed) {
    if (o.origin === "request") throw new PlanError("invalid_overrides", `invalid overrides: override '${o.path}' matches nothing in config '${request.configName}'`);
    warnings.push(`override '${o.path}' in '${o.origin.file}' matches nothing and was not applied`);
  }

  const view = effectiveView(loaded);
  let model = wrap(() => checkModel(view), "invalid_config");
  if (patch !== undefined) {
    if (!isYMap(patch)) throw new PlanError("invalid_overrides", "invalid overrides: expected an object");
    const merged = patch;
    model = wrap(
      () => {
        deepMerge(view, merged, "", new Budget());
        return checkModel(view);
      },
      "invalid_overrides",
      "invalid overrides: ",
    );
  }

  // Selection.
  const suite = request.suite ?? "";
  let selection: TestPlan["selection"] = "all";
  let groupNames = [...model.groups.keys()];
  let metadata = model.metadata;
  if (suite !== "") {
    if (model.suites.has(suite)) {
      selection = "suite";
      groupNames = wrap(() => expandSuite(model, suite, warnings), "invalid_config");
      const wanted = new Set(model.suites.get(suite)!.metadata);
      const known = new Set(metadata.map((m) => m.name));
      for (const name of wanted) if (!known.has(name)) warnings.push(`test-suite '${suite}': unknown metadata '${name}' skipped`);
      metadata = metadata.filter((m) => wanted.has(m.name)); // in definition order
    } else if (model.groups.has(suite)) {
      selection = "group";
      groupNames = [suite];
    } else {
      throw new PlanError("unknown_suite", `Unknown test suite or test group: ${suite}`);
    }
  }

  // Machine filter, expansion and numbering; params become plain data.
  const target = request.machineTarget ?? null;
  const keep = (machines: string[]) => target === null || (target === "localhost" ? machines.length === 0 : machines.includes(target));
  const budget = new Budget(1_000_000);
  const entries: PlanEntry[] = [];
  for (const name of groupNames) {
    for (const entry of model.groups.get(name)!.entries) {
      if (!keep(entry.machines)) continue;
      const { rawParams, ...rest } = entry;
      const params = wrap(() => (rawParams ? (toPlain(rawParams, budget) as Record<string, unknown>) : {}), "invalid_config");
      delete params.machines;
      delete params.override;
      entries.push({ ...rest, params, paramId: "" });
    }
  }

  return {
    configName: request.configName,
    suite,
    selection,
    machineTarget: target,
    groups: groupNames,
    entries: numberEntries(entries),
    metadata,
    aggregateResults: model.aggregateResults,
    combinedResultsDirPrefix: model.combinedResultsDirPrefix,
    warnings,
    overrides: recorded,
    files: loaded.files,
  };
}

/** `GET .../test-suites`: suite names in first-definition order over the load order. */
export function listSuites(source: ConfigSource, configName: string): string[] {
  const loaded = load(source, configName);
  const model = wrap(() => checkModel(effectiveView(loaded)), "invalid_config");
  return loaded.suiteOrder.filter((name) => model.suites.has(name));
}

/** `GET .../override-hints`: every file's hints, main file first, includes depth-first. */
export function overrideHints(source: ConfigSource, configName: string): string[] {
  return load(source, configName).hints;
}

/** A source over a snapshot (`plan.files`), so a pending run never reads the store again. */
export const snapshotSource = (files: Record<string, string>): ConfigSource => ({
  read: (name) => (Object.hasOwn(files, name) ? files[name] : undefined),
});
