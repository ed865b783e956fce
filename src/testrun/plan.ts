/**
 * The run plan: what a test run executes, derived from a stored config, a suite or group name,
 * request overrides and a node role. The run engine only
 * consumes this; the YAML dialect, includes, anchors and overrides live in ./config/.
 *
 * A plan is plain JSON-serialisable data, so the engine can store it with the run as the
 * trigger-time snapshot and never has to re-read the store for a pending run.
 */
import { LabgateError, type ErrorCode } from "../util/errors.ts";

/** What went wrong, so a caller can answer differently (Variant B answers 400 for a missing config). */
export type PlanProblem =
  /** The named config is not in the store (404 `Configuration file not found`). */
  | "config_missing"
  /** `config_name` is not a safe store name (400 `invalid config name`). */
  | "bad_config_name"
  /** `test_suite_name` names neither a suite nor a group. */
  | "unknown_suite"
  /** Request overrides are malformed or match nothing (400 `invalid overrides: ...`). */
  | "invalid_overrides"
  /** The config (or an include) does not load or is semantically invalid. */
  | "invalid_config";

/** Each problem's error code: its status in Variant A. */
const PLAN_ERROR_CODE: Record<PlanProblem, ErrorCode> = {
  config_missing: "not_found",
  bad_config_name: "invalid",
  unknown_suite: "not_found",
  invalid_overrides: "invalid",
  invalid_config: "unprocessable",
};

/** A config/plan problem. A route may simply let it propagate. */
export class PlanError extends LabgateError {
  readonly problem: PlanProblem;
  /** `at`: the config file and line of the problem, when known; the error body carries them as `file` and `line`. */
  constructor(problem: PlanProblem, message: string, at?: { file: string; line: number }) {
    super(PLAN_ERROR_CODE[problem], message, at && { file: at.file, line: at.line });
    this.problem = problem;
  }
}

/** One module instance to execute: a `- module: params` item of a group. */
export interface PlanEntry {
  /** Group name as text (YAML 1.1 keys are rendered like Python's str(): `000:` is "0"). */
  group: string;
  /** Index of the entry inside its group's expanded entry list (a multi-key item counts once per key). */
  index: number;
  /**
   * Where the entry was defined, for messages and warnings: `tests.<group>.<index>.<module>`
   * (e.g. `tests.g.0.exec`), which is also the dotted path of its parameters.
   */
  where: string;
  /** Module key as written in YAML (`simple`, `exec`, `nested_tests/impl1/hello`). */
  module: string;
  /**
   * Module parameters after every override (in-file, request string form, object deep merge).
   * `machines` and the hint key `override` are removed; everything else is passed as written.
   * A `- sleep:` entry without params gives `{}`.
   */
  params: Record<string, unknown>;
  /** Machines the entry runs on; empty = local (runs on the node that got the trigger). */
  machines: string[];
  /**
   * Parameter id `test_config<k>`: k counts earlier entries with the same module key in this
   * plan, from 0. Numbered after suite selection and machine filtering.
   */
  paramId: string;
}

/** A metadata command, validated: `run` present, name a safe file name. */
export interface MetadataCommand {
  /** Metadata name: the result key and the artifact file name (`[A-Za-z0-9._-]+`, no leading dot). */
  name: string;
  /** Shell command, run as `/bin/sh -c <run>`. */
  run: string;
  /**
   * Fallback run when `run` fails. `output` is the reference's result name (default: `name`);
   * labgate stores the result under `name` anyway, so it is informational.
   */
  onFail: { run: string; output: string } | null;
  /** `required` / `preferred`: when not root the engine adds a warning and still runs the command. */
  superuser: "required" | "preferred" | null;
}

/** The expanded, ordered selection for one run. */
export interface TestPlan {
  /** Store name of the main config. */
  configName: string;
  /** `test_suite_name` as requested; "" for none. */
  suite: string;
  /** How `suite` was resolved: every group, a named suite, or a single group. */
  selection: "all" | "suite" | "group";
  /**
   * Node role the entries were filtered for: null = no filtering (a local run or the
   * orchestrator's view, entries keep their `machines`); "localhost" = entries without
   * machines; any other name = entries whose machines contain it.
   */
  machineTarget: string | null;
  /** Selected groups in execution order (before dropping groups left empty by the machine filter). */
  groups: string[];
  /** Entries in execution order (group order, then entry order); groups left empty are gone. */
  entries: PlanEntry[];
  /** Metadata commands to run at the start of the run, in definition order. */
  metadata: MetadataCommand[];
  /** `aggregate_results` of the main file. */
  aggregateResults: boolean;
  /** `combined_results_dir_prefix` of the main file, default `combined_`. */
  combinedResultsDirPrefix: string;
  /** Non-fatal problems for the run's `warnings` (unknown suite members, unconsumed in-file overrides, ...). */
  warnings: string[];
  /**
   * The request overrides as the run object shows them: the string form split into lines,
   * the object form as given, null when none.
   */
  overrides: string[] | Record<string, unknown> | null;
  /** Snapshot of every config file the load read (main file and includes): store name -> text. */
  files: Record<string, string>;
  /**
   * A run on managed devices (src/testrun/devices/): each device's share, resolved from the
   * `device:`/`group:`/`tag:` targets at trigger time. Absent for runs here or on lab nodes.
   */
  devices?: DeviceShare[];
  /** Script module files the device shares use, as they were at trigger: module key -> YAML text. */
  modules?: Record<string, string>;
  /** A deployment's validation run (src/testrun/devices/validation.ts): that deployment's id; its end decides the device's update. */
  validates?: number;
  /** Who triggered a run on devices, with the scopes of the token: the `power` module switches boards with that authority. */
  caller?: { user: string; scopes: string[] };
}

/**
 * A config as it was when it was pinned (a deployment's validation, docs/device-tests.md): its
 * files (main file and includes) and the script modules its entries use, so that what runs later
 * is what was checked then, whatever the store holds by that time.
 */
export interface PinnedConfig {
  config: string;
  suite: string;
  /** Store name -> text. */
  files: Record<string, string>;
  /** Module key -> YAML text. */
  modules: Record<string, string>;
}

/** One device's share of a run on managed devices. */
export interface DeviceShare {
  id: number;
  mac: string;
  /** The report's `device name`. */
  name: string;
  /** Its artifacts' directory in the run's artifacts (a safe, unique file name). */
  dir: string;
  /** Its entries, numbered for it (`test_config<k>`). */
  entries: PlanEntry[];
}

/** Where config texts come from: the store, or a snapshot (`plan.files`). */
export interface ConfigSource {
  /** The file's text, or undefined when there is no such config. */
  read(name: string): string | undefined;
}

/** A trigger (or repeat) as far as the plan is concerned. */
export interface PlanRequest {
  /** Store name of the config (`api-test.yml`). */
  configName: string;
  /** Suite or group name; "" / null / undefined = everything. */
  suite?: string | null;
  /** Variant A string form (newline-delimited YAML) or object form deep-merged. */
  overrides?: string | Record<string, unknown> | null;
  /** Node role; undefined/null = no machine filtering. */
  machineTarget?: string | null;
}

/** The names of a case that a repeat pattern is matched against, and its report names. */
export interface CaseNames {
  /** Report `test name`: `<case>[test_config<k>]`. */
  testName: string;
  /** Report `module`: `test.py::<Class>::test_<case>[test_config<k>]`. */
  moduleColumn: string;
  /** Every name a pattern identifier is tested against (case-insensitive substring). */
  matchNames: string[];
}

/** The entry's `name:` in the config, the name a person gave it ("" without one). */
export const entryName = (entry: Pick<PlanEntry, "params">): string => (typeof entry.params.name === "string" ? entry.params.name : "");

/** Names of case `caseName` of `entry`, for a module whose report class is `className`. */
export function caseNames(entry: Pick<PlanEntry, "module" | "paramId">, caseName: string, className: string): CaseNames {
  const functionId = `test_${caseName}[${entry.paramId}]`;
  const testName = `${caseName}[${entry.paramId}]`;
  const segments = entry.module.split("/").filter((s) => s !== "");
  return {
    testName,
    moduleColumn: `test.py::${className}::${functionId}`,
    matchNames: [functionId, testName, className, "test.py", entry.module, ...segments],
  };
}

/**
 * Keeps the entries of `plan` that run on `machineTarget` and renumbers the parameter ids
 * (numbering follows the machine filter).
 */
export function planForMachine(plan: TestPlan, machineTarget: string): TestPlan {
  const kept = plan.entries.filter((e) => (machineTarget === "localhost" ? e.machines.length === 0 : e.machines.includes(machineTarget)));
  return { ...plan, machineTarget, entries: numberEntries(kept) };
}

/** Every machine named by the plan's entries, in first-mention order. */
export function planMachines(plan: TestPlan): string[] {
  return [...new Set(plan.entries.flatMap((e) => e.machines))];
}

/** Assigns `test_config<k>` per module key in list order. */
export function numberEntries(entries: PlanEntry[]): PlanEntry[] {
  const counts = new Map<string, number>();
  return entries.map((e) => {
    const k = counts.get(e.module) ?? 0;
    counts.set(e.module, k + 1);
    return { ...e, paramId: `test_config${k}` };
  });
}

