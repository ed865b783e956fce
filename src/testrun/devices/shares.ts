/*
 * From a plan to each device's share (docs/device-tests.md): which entries go to which device
 * once the targets are resolved, and which cases the gateway expects back from it.
 */
import { LabgateError } from "../../util/errors.ts";
import { compilePattern } from "../engine/pattern.ts";
import { findModule, isBuiltinModule, type ModuleLookup } from "../modules/registry.ts";
import { readScriptModule } from "../modules/script.ts";
import { caseNames, entryName, numberEntries, planMachines, type DeviceShare, type PlanEntry, type TestPlan } from "../plan.ts";
import { isDeviceTarget } from "./names.ts";
import type { TargetDevice } from "./targets.ts";

/**
 * File names for the devices' artifact directories: safe, and unique within the run by
 * construction (a name already taken, by a device's own name or by an earlier suffix, gets the
 * MAC address, then a number, until it is free), so no two devices ever write one directory.
 */
function directoryNames(devices: TargetDevice[]): Map<number, string> {
  const out = new Map<number, string>();
  const taken = new Set<string>();
  for (const d of devices) {
    const base = d.name.replace(/[^A-Za-z0-9._-]/g, "_").replace(/^\.+/, "_").slice(0, 100) || "device";
    let dir = base;
    if (taken.has(dir)) dir = `${base}_${d.mac.replace(/:/g, "")}`;
    for (let n = 2; taken.has(dir); n++) dir = `${base}_${d.mac.replace(/:/g, "")}_${n}`;
    taken.add(dir);
    out.set(d.id, dir);
  }
  return out;
}

/**
 * The device targets of a trigger and the entries each applies to, or undefined when it names
 * no device. `machine_target` naming devices runs the entries that name no machine, and those
 * that name that target, on each of its devices; otherwise the entries' own `machines:` say, and
 * then every entry must name devices only (a run goes either to devices or to lab nodes).
 */
export function deviceTargetsOf(plan: TestPlan, machineTarget: string | null): { targets: string[]; entries: Array<{ entry: PlanEntry; targets: string[] }> } | undefined {
  if (machineTarget !== null) {
    if (!isDeviceTarget(machineTarget)) return undefined;
    const entries = plan.entries.filter((e) => e.machines.length === 0 || e.machines.includes(machineTarget)).map((entry) => ({ entry, targets: [machineTarget] }));
    return { targets: [machineTarget], entries };
  }
  const machines = planMachines(plan);
  const devices = machines.filter(isDeviceTarget);
  if (devices.length === 0) return undefined;
  const nodes = machines.filter((m) => !isDeviceTarget(m));
  if (nodes.length > 0) throw new LabgateError("invalid", `a run goes either to devices or to lab nodes: this selection names both (${devices[0]}, ${nodes[0]})`);
  const local = plan.entries.find((e) => e.machines.length === 0);
  if (local) throw new LabgateError("invalid", `${local.where} names no machine while others name devices: give it machines (e.g. ${devices[0]}) or trigger with machine_target`);
  return { targets: devices, entries: plan.entries.map((entry) => ({ entry, targets: entry.machines })) };
}

/** Splits the entries over the resolved devices (first mention first), each device's numbered for it. */
export function deviceShares(entries: Array<{ entry: PlanEntry; targets: string[] }>, resolved: Map<string, TargetDevice[]>): DeviceShare[] {
  const devices = new Map<number, { device: TargetDevice; entries: PlanEntry[] }>();
  for (const { entry, targets } of entries) {
    const seen = new Set<number>();
    for (const device of targets.flatMap((t) => resolved.get(t) ?? [])) {
      if (seen.has(device.id)) continue;
      seen.add(device.id);
      if (!devices.has(device.id)) devices.set(device.id, { device, entries: [] });
      devices.get(device.id)!.entries.push(entry);
    }
  }
  const dirs = directoryNames([...devices.values()].map((d) => d.device));
  return [...devices.values()].map(({ device, entries: own }) => ({ ...device, dir: dirs.get(device.id)!, entries: numberEntries(own) }));
}

/** The script module files the shares use, from the data dir now (they travel with the plan). */
export function shareModules(shares: DeviceShare[], dataDir: string): Record<string, string> {
  return scriptModules(shares.flatMap((s) => s.entries), dataDir);
}

/** The script module files `entries` use, from the data dir now: key -> YAML text. */
export function scriptModules(entries: PlanEntry[], dataDir: string): Record<string, string> {
  const modules: Record<string, string> = {};
  for (const entry of entries) {
    if (isBuiltinModule(entry.module) || Object.hasOwn(modules, entry.module)) continue;
    const text = readScriptModule(dataDir, entry.module);
    if (text !== undefined) modules[entry.module] = text;
  }
  return modules;
}

/** A case the gateway expects from a device: its report names. */
export interface ExpectedCase {
  testName: string;
  module: string;
  /** Its entry's `name:` ("" without one). */
  name: string;
}

/**
 * The cases a device's share reports when it runs to the end: each static module's cases (after
 * the pattern); a module that knows its cases only after set-up (junit) counts as one case named
 * after the entry. What a device never sends back is reported failed with the reason.
 */
export function expectedCases(entries: PlanEntry[], pattern: string, lookup: ModuleLookup): ExpectedCase[] {
  const matcher = pattern ? compilePattern(pattern) : undefined;
  const out: ExpectedCase[] = [];
  for (const entry of entries) {
    let module;
    try {
      module = findModule(entry.module, lookup);
    } catch {
      module = undefined;
    }
    if (!module || module.dynamicCases) {
      out.push({ testName: `${entry.module}[${entry.paramId}]`, module: entry.where, name: entryName(entry) });
      continue;
    }
    for (const c of module.cases({ params: entry.params, state: {} })) {
      const names = caseNames(entry, c.name, module.className);
      if (!matcher || matcher(names.matchNames)) out.push({ testName: names.testName, module: names.moduleColumn, name: entryName(entry) });
    }
  }
  return out;
}
