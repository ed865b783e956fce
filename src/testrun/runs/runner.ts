import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { describeExit, type ProcessResult } from "../../util/process.ts";
import type { RunContainer, RunContainment } from "../engine/containment.ts";
import { runTestProcess, type TestIdentity, type TestWorkspace } from "../engine/identity.ts";
import { testFiles } from "../engine/test-files.ts";
import { compilePattern, type Matcher } from "../engine/pattern.ts";
import { outputTail, ReportWriter, type ReportColumn, type ReportRow } from "../engine/report.ts";
import { resolveEntry, type ModuleLookup } from "../modules/registry.ts";
import { CaseSkip, type CaseDef, type EntryContext, type HardwareRoots, type ModuleDef, type Outcome } from "../modules/types.ts";
import { caseNames, entryName, type MetadataCommand, type PlanEntry, type TestPlan } from "../plan.ts";
import { readHead } from "../../util/files.ts";
import { dateOf, type Clock } from "../../util/time.ts";
import type { RunCounts } from "../schema.ts";
import { artifactsDir, reportDetailsPath, reportPath, type TestrunDirs } from "../paths.ts";

const METADATA_VALUE_LIMIT = 1024 * 1024;
export const ABORT_MESSAGE = "Aborted by user";
export const NO_MATCH_ERROR = "no test case matches the pattern";

export interface RunInput {
  id: string;
  plan: TestPlan;
  pattern: string;
  machineTarget: string | null;
}

export interface RunEnvironment extends ModuleLookup {
  dirs: TestrunDirs;
  /** Where the report's start times come from (durations are measured, not read from it). */
  clock: Clock;
  /** `test_server.report_columns`. */
  reportColumns: readonly ReportColumn[];
  /** `test_server.metadata_timeout` in milliseconds. */
  metadataTimeoutMs: number;
  /** Where the hardware modules read sysfs, /dev and firmware. */
  roots: HardwareRoots;
  /** Called after every report row is written (tests and progress logging). */
  onRow?: (row: ReportRow) => void;
  /** `test_server.run_as`: who the run's programs and file checks run as; absent: the server's user. */
  identity?: TestIdentity;
  /** With `identity`: where the run's working directory is made (its files move to the artifacts at the end). */
  workspace?: TestWorkspace;
  /** What holds each run's processes, so that none outlives its run (absent: their process groups only). */
  containment?: RunContainment;
  /** A share on a managed device: the `power` module's way to its board (the agent asks the gateway). */
  power?: EntryContext["power"];
}

export interface RunResult {
  status: "finished" | "failed" | "aborted";
  error: string | null;
  metadata: Record<string, string | null>;
  warnings: string[];
  /** The report's rows by status. */
  counts: RunCounts;
}

class ExecutionError extends Error {}

const messageOf = (o: Outcome): string => (o.status === "passed" ? "" : o.status === "failed" ? o.message : o.reason ? `Skipped: ${o.reason}` : "Skipped");
const errorMessage = (e: unknown) => (e instanceof Error ? e.message : String(e));

/** Reads back what a metadata command printed (stdout and stderr interleaved, as written). */
const readOutput = async (file: string): Promise<string> => (await readHead(file, METADATA_VALUE_LIMIT)).toString("utf8").trimEnd();

/** Runs the metadata commands at the start of a run; throws ExecutionError when one fails. */
async function runMetadata(commands: MetadataCommand[], dir: string, env: RunEnvironment, container: RunContainer | undefined, signal: AbortSignal, warnings: string[]): Promise<Record<string, string | null>> {
  const values: Record<string, string | null> = {};
  const isRoot = process.getuid?.() === 0 && !env.identity;
  const timeoutMs = env.metadataTimeoutMs;
  const run = async (name: string, command: string): Promise<ProcessResult> => {
    const r = await runTestProcess(env.identity, dir, { command, cwd: dir, timeoutMs, signal, outputFile: join(dir, name) }, container);
    if (r.exitCode === 0) values[name] = await readOutput(join(dir, name)).catch(() => null);
    return r;
  };
  for (const m of commands) {
    if (signal.aborted) return values;
    if (m.superuser && !isRoot) warnings.push(`metadata '${m.name}': superuser ${m.superuser} but tests do not run as root; running anyway`);
    let r = await run(m.name, m.run);
    if (r.exitCode === 0 || signal.aborted) continue;
    if (m.onFail) {
      // The result key (and artifact name) is always the metadata name.
      r = await run(m.name, m.onFail.run);
      if (r.exitCode === 0 || signal.aborted) continue;
    }
    throw new ExecutionError(`metadata command '${m.name}' failed: ${r.timedOut ? "timed out" : describeExit(r)}`);
  }
  return values;
}

/**
 * Executes one run: metadata, then every entry's cases in order, writing the
 * CSV report row by row. A set-up failure fails every selected case of the entry; a tear-down
 * failure adds a row; an abort stops at once, the case in progress reported `skipped`.
 */
export async function executeRun(input: RunInput, env: RunEnvironment, signal: AbortSignal): Promise<RunResult> {
  const artifacts = artifactsDir(env.dirs, input.id);
  await mkdir(artifacts, { recursive: true });
  // Under run_as the run works in a directory of its user's; its files join the artifacts at the end.
  const dir = env.workspace ? await env.workspace.open(input.id) : artifacts;
  let container: RunContainer | undefined;
  try {
    container = await env.containment?.open(input.id);
    return await executeIn(dir, input, env, container, signal);
  } finally {
    // Nothing the run started outlives it (an error when something does), before its files leave the test's reach.
    await container?.end();
    await env.workspace?.close(input.id, artifacts);
  }
}

async function executeIn(dir: string, input: RunInput, env: RunEnvironment, container: RunContainer | undefined, signal: AbortSignal): Promise<RunResult> {
  const report = await ReportWriter.create(reportPath(env.dirs, input.id), env.reportColumns, { details: reportDetailsPath(env.dirs, input.id) });
  const warnings: string[] = [];
  let metadata: Record<string, string | null> = {};
  let error: string | null = null;
  let rows = 0;
  const counts: RunCounts = { passed: 0, failed: 0, skipped: 0 };
  const matcher: Matcher | undefined = input.pattern ? compilePattern(input.pattern) : undefined;

  const write = async (row: ReportRow) => {
    // The reference lists the run's metadata files after the case's own artifacts.
    row = { ...row, artifacts: [...row.artifacts, ...Object.keys(metadata)] };
    await report.append(row);
    rows++;
    counts[row.status]++;
    env.onRow?.(row);
  };

  try {
    metadata = await runMetadata(input.plan.metadata, dir, env, container, signal, warnings);
    for (const entry of input.plan.entries) {
      if (signal.aborted) break;
      await runEntry(entry, input, env, container, dir, signal, matcher, write, warnings);
    }
  } catch (e) {
    error = e instanceof ExecutionError ? e.message : `runner error: ${errorMessage(e)}`;
  } finally {
    await report.close();
  }

  if (signal.aborted) return { status: "aborted", error, metadata, warnings, counts };
  if (error) return { status: "failed", error, metadata, warnings, counts };
  if (matcher && rows === 0) return { status: "failed", error: NO_MATCH_ERROR, metadata, warnings, counts };
  return { status: counts.failed > 0 ? "failed" : "finished", error: null, metadata, warnings, counts };
}

async function runEntry(
  entry: PlanEntry,
  input: RunInput,
  env: RunEnvironment,
  container: RunContainer | undefined,
  dir: string,
  signal: AbortSignal,
  matcher: Matcher | undefined,
  write: (row: ReportRow) => Promise<void>,
  warnings: string[],
): Promise<void> {
  const resolved = resolveEntry(entry.where, entry.module, entry.params, env);
  // Validated at trigger; a script module file changed since then is an execution error.
  if ("error" in resolved) throw new ExecutionError(resolved.error);
  const module: ModuleDef = resolved.module;
  const recorded: string[] = [];
  // What the entry's last program printed: a failure shows its end unless the case says better.
  let lastOutput = "";
  const remember = (r: ProcessResult): ProcessResult => {
    lastOutput = [r.stdout.trimEnd(), r.stderr.trimEnd()].filter(Boolean).join("\n");
    return r;
  };
  const ctx: EntryContext = {
    params: entry.params,
    artifactsDir: dir,
    signal,
    machineTarget: input.machineTarget,
    roots: env.roots,
    moduleKey: entry.module,
    state: {},
    // For the reference's `artifacts` column; the artifacts endpoint lists every file regardless.
    recordArtifact: (name) => void recorded.push(name),
    // Every program a module starts goes through here (tools of the hardware modules too).
    exec: (options) => runTestProcess(env.identity, dir, { ...options, cwd: options.cwd ?? dir, signal, clock: env.clock }, container).then(remember),
    files: testFiles(env.identity, dir),
    warn: (message) => void warnings.push(`${entry.where}: ${message}`),
    sleep: (ms) => env.clock.sleep(ms, signal),
    clock: env.clock,
    ...(env.power ? { power: env.power } : {}),
  };
  const selected = (cases: CaseDef[]) => (matcher ? cases.filter((c) => matcher(caseNames(entry, c.name, module.className).matchNames)) : cases);

  let cases: CaseDef[] = [];
  if (!module.dynamicCases) {
    cases = selected(module.cases(ctx));
    // Nothing selected: the entry does not run at all (not even its set-up).
    if (cases.length === 0) return;
  }

  const setupStarted = performance.now();
  const setupStart = dateOf(env.clock);
  let setupOutcome: Outcome | undefined;
  try {
    await module.setup?.(ctx);
  } catch (e) {
    setupOutcome = e instanceof CaseSkip ? { status: "skipped", ...(e.message ? { reason: e.message } : {}) } : { status: "failed", message: errorMessage(e) };
  }
  let setupSeconds = (performance.now() - setupStarted) / 1000;
  if (module.dynamicCases) cases = selected(module.cases(ctx));

  let deviceName: string;
  try {
    deviceName = module.deviceName(ctx);
  } catch {
    deviceName = entry.module;
  }
  const row = (c: CaseDef, outcome: Outcome, seconds: number, startTime: Date, artifacts: string[] = []): ReportRow => {
    const names = caseNames(entry, c.name, module.className);
    return {
      startTime,
      deviceName,
      testName: names.testName,
      module: names.moduleColumn,
      duration: outcome.duration ?? seconds,
      message: messageOf(outcome),
      status: outcome.status,
      artifacts,
      name: entryName(entry),
      output: outcome.status === "failed" ? outputTail(outcome.output ?? lastOutput) : "",
    };
  };

  const abortedRow = (c: CaseDef, seconds: number, startTime: Date): ReportRow => ({ ...row(c, { status: "skipped" }, seconds, startTime), message: ABORT_MESSAGE });

  let last: CaseDef | undefined;
  let first = true;
  for (const c of cases) {
    if (signal.aborted) {
      // The abort came during set-up, which belongs to the first case: report it; later cases never started.
      if (!last) await write(abortedRow(c, setupSeconds, setupStart));
      break;
    }
    last = c;
    // Names recorded during set-up go with the first case; later ones with the case that records them.
    if (!first) recorded.length = 0;
    first = false;
    const started = performance.now();
    const startTime = setupOutcome ? setupStart : dateOf(env.clock);
    let outcome: Outcome;
    if (setupOutcome) {
      outcome = setupOutcome;
    } else {
      try {
        outcome = await c.run(ctx);
      } catch (e) {
        outcome = { status: "failed", message: errorMessage(e) };
      }
    }
    const seconds = setupOutcome ? setupSeconds : (performance.now() - started) / 1000;
    setupSeconds = 0;
    await write(signal.aborted ? abortedRow(c, seconds, startTime) : row(c, outcome, seconds, startTime, [...recorded]));
  }

  const teardownStart = dateOf(env.clock);
  try {
    await module.teardown?.(ctx);
  } catch (e) {
    if (last && !signal.aborted) await write(row(last, { status: "failed", message: errorMessage(e) }, 0, teardownStart));
  }
}
