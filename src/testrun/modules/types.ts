import type { ProcessOptions, ProcessResult } from "../../util/process.ts";
import type { Clock } from "../../util/time.ts";
import type { TestFiles } from "../engine/test-files.ts";
import type { Params, ParamSchema } from "./params.ts";

export type { Params };


/** What one case produced. The runner turns a skip into `Skipped` / `Skipped: <reason>`. */
export type Outcome = ({ status: "passed" } | { status: "failed"; message: string; output?: string } | { status: "skipped"; reason?: string }) & {
  /** Seconds, when the module knows better than the runner's clock (junit's `time`). */
  duration?: number;
};

export const pass = (): Outcome => ({ status: "passed" });
/** `output`: what the check saw (the program's output), shown with the failure; without it the runner shows the entry's last program's. */
export const fail = (message: string, output?: string): Outcome => ({ status: "failed", message, ...(output ? { output } : {}) });
export const skip = (reason?: string): Outcome => ({ status: "skipped", ...(reason ? { reason } : {}) });

/** Thrown from set-up or tear-down: every case of the entry fails with this message. */
export class CaseFailure extends Error {}
/** Thrown from set-up: every case of the entry is skipped. */
export class CaseSkip extends Error {}

/** Where the hardware modules read sysfs, device nodes and firmware (`test_server.sys_root`, `dev_root`, `firmware_root`). */
export interface HardwareRoots {
  sys: string;
  dev: string;
  firmware: string;
}

/** Everything a module instance (one entry) sees. A fresh one per entry: no state leaks. */
export interface EntryContext {
  params: Params;
  /** The run's working directory (its artifacts: the run's artifact directory, or under run_as its own directory, moved there at the end); modules write files here. */
  artifactsDir: string;
  /** Aborted when the user aborts the run or the server shuts down; stop promptly. */
  signal: AbortSignal;
  /** The node role of the run; null for a local run. */
  machineTarget: string | null;
  /** Where a config's `/sys/...`, `/dev/...` and firmware names are looked up (hardware.ts). */
  roots: HardwareRoots;
  /** The module key of this entry (`exec`, `nested/impl1/hello`). */
  moduleKey: string;
  /** Per-entry instance state, filled by set-up and read by the cases. */
  state: Record<string, unknown>;
  /** Records an artifact name. */
  recordArtifact(name: string): void;
  /**
   * Runs a program for the test (runTestProcess: as `test_server.run_as` when set, clean
   * environment, the run's abort signal); cwd defaults to the artifact directory. Every program a
   * module starts goes through here.
   */
  exec(options: Omit<ProcessOptions, "signal" | "cwd" | "as" | "baseEnv" | "clock" | "cgroup" | "noNewPrivs"> & { cwd?: string }): Promise<ProcessResult>;
  /** Files the config names (paths, reports), read and written as the test's user, never the server's. */
  files: TestFiles;
  /** A non-fatal remark stored in the run's `warnings`. */
  warn(message: string): void;
  /** Waits `ms` on the server's clock; an abort of the run ends the wait at once. */
  sleep(ms: number): Promise<void>;
  /** The server's clock, for a module's own deadlines (`after(ctx.clock, ...)`). */
  clock: Clock;
  /** Switches the power of the board the share runs on, through its gateway (a run on devices only); throws why it did not. */
  power?: (action: "on" | "off" | "cycle") => Promise<void>;
}

export interface CaseDef {
  /** Case name without the `test_` prefix; only pattern identifier characters. */
  name: string;
  run(ctx: EntryContext): Promise<Outcome> | Outcome;
}

/** One test module. */
export interface ModuleDef {
  key: string;
  /** Class name used in report names (`TestExec`). */
  className: string;
  /** One sentence for docs/modules.md. */
  summary?: string;
  /** Compatibility modules are hidden unless `test_server.compat_modules` is on. */
  compat?: boolean;
  /** Declared once (params.ts): validated at trigger, documented in docs/modules.md. */
  params: ParamSchema;
  /** Checks across params, at trigger; returns a message for a 422. */
  validate?(params: Params): string | undefined;
  /** The report's device name; called after set-up, so it may use `state`. */
  deviceName(ctx: Pick<EntryContext, "params" | "state">): string;
  /**
   * Cases in run order. Static modules answer from params alone (the runner filters them by
   * pattern before set-up); `dynamicCases` modules (junit) know them only after set-up.
   */
  cases(ctx: Pick<EntryContext, "params" | "state">): CaseDef[];
  dynamicCases?: boolean;
  setup?(ctx: EntryContext): Promise<void>;
  teardown?(ctx: EntryContext): Promise<void>;
}
