/*
 * What a reader of runs sees of the managed devices they ran on (docs/device-tests.md, "Who
 * sees a device's results"): only the devices it may `read` (the update server's permission).
 * Every view of a run (its object, in lists, triggers and the live stream; its report as CSV,
 * JSON and summary; its artifacts; a config's history) goes through `seenRun` or DeviceSight, so
 * a device the reader may not see is left out of all of them alike.
 */
import { createHash } from "node:crypto";
import type { Identity } from "../../app/context.ts";
import type { Queries } from "../../db/store.ts";
import { deviceMacs } from "../../update/devices/devices.ts";
import { permissionFilter } from "../../update/permissions/permissions.ts";
import { deviceErrors, deviceLabel } from "../devices/names.ts";
import type { RunRecord } from "./store.ts";

/** The devices (by MAC address) one reader may read. */
export class DeviceSight {
  /** An admin's reads, or `test_server.auth: none` (nobody to ask). */
  static readonly ALL = new DeviceSight(undefined);
  /** A reader whose access has ended (its stream ends too). */
  static readonly NONE = new DeviceSight(new Set());
  /** undefined: every device. */
  readonly macs: ReadonlySet<string> | undefined;

  private constructor(macs: ReadonlySet<string> | undefined) {
    this.macs = macs;
  }

  static async of(q: Queries, identity: Identity | undefined): Promise<DeviceSight> {
    if (!identity) return DeviceSight.ALL;
    const filter = permissionFilter(identity, "device", "d");
    if (!filter) return DeviceSight.ALL;
    return new DeviceSight(await deviceMacs(q, filter));
  }

  sees(mac: string): boolean {
    return this.macs === undefined || this.macs.has(mac);
  }
}

/** A run as one reader may see it. */
export interface SeenRun {
  /** The record with the devices it may not see left out, and every word of them (error, warnings, a `device:` target). */
  run: RunRecord;
  /** Nothing is left out: the report and the artifacts are served as stored. */
  whole: boolean;
  /** Whether a report row of the device at this place in the run's `devices` is shown. */
  keepsRow(device: number): boolean;
  /** Whether an artifact (its name relative to the run's directory) is shown. */
  keepsArtifact(name: string): boolean;
  /** Tells apart what different readers get of the same run ("" for the whole run), e.g. in an ETag. */
  variant: string;
}

/**
 * `run` as seen by `sight`. A reader that may see none of its devices still sees the run (its
 * status, config, times) with no devices, a report of the header alone and no artifacts.
 */
export function seenRun(run: RunRecord, sight: DeviceSight): SeenRun {
  const devices = run.devices;
  const shown = devices?.map((d) => sight.sees(d.mac)) ?? [];
  if (!devices || shown.every(Boolean)) return { run, whole: true, keepsRow: () => true, keepsArtifact: () => true, variant: "" };
  const visible = devices.filter((_, i) => shown[i]);
  const hidden = devices.filter((_, i) => !shown[i]);
  // A name or a directory a hidden device shares with a visible one counts as hidden: nothing of it leaks.
  const hiddenNames = hidden.map((d) => deviceLabel(d.name));
  const hiddenDirs = new Set(hidden.map((d) => d.dir));
  const visibleDirs = new Set(visible.map((d) => d.dir).filter((dir) => !hiddenDirs.has(dir)));
  const namesHidden = (text: string) => hiddenNames.some((label) => text.startsWith(label));
  const error = run.error !== null && run.error === deviceErrors(devices) ? deviceErrors(visible.filter((d) => !namesHidden(deviceLabel(d.name)))) || null : run.error;
  return {
    run: {
      ...run,
      devices: visible,
      error,
      warnings: run.warnings.filter((w) => !namesHidden(w)),
      machineTarget: run.machineTarget?.startsWith("device:") && visible.length === 0 ? null : run.machineTarget,
    },
    whole: false,
    keepsRow: (device) => shown[device] === true,
    keepsArtifact: (name) => visibleDirs.has(name.split("/")[0]),
    variant: `-seen-${createHash("sha256").update(shown.map(Number).join("")).digest("base64url").slice(0, 16)}`,
  };
}
