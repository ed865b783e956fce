import { isAbsolute, join } from "node:path";
import { describeExit, programName, type ProcessResult } from "../../util/process.ts";
import { command, envOf, ints, list, num, optional, paramSchema, regexError, required, str } from "./params.ts";
import { CaseFailure, fail, pass, type CaseDef, type EntryContext, type ModuleDef, type Outcome, type Params } from "./types.ts";
import { safeArtifactName } from "./artifact-names.ts";

const OUTPUT_CHECKS = ["contains", "regex", "not_regex"] as const;

/** Checks `text` against `<stream>_contains`, `_regex`, `_not_regex` (all must hold). */
export function checkOutput(p: Params, stream: "stdout" | "stderr", text: string): Outcome {
  for (const needle of list(p, `${stream}_contains`)) if (!text.includes(needle)) return fail(`${stream} does not contain ${JSON.stringify(needle)}`);
  for (const source of list(p, `${stream}_regex`)) if (!new RegExp(source, "m").test(text)) return fail(`${stream} does not match /${source}/`);
  for (const source of list(p, `${stream}_not_regex`)) if (new RegExp(source, "m").test(text)) return fail(`${stream} matches /${source}/`);
  return pass();
}

export const hasOutputChecks = (p: Params, stream: "stdout" | "stderr") => OUTPUT_CHECKS.some((c) => p[`${stream}_${c}`] !== undefined && p[`${stream}_${c}`] !== null);

/** Resolves a `cwd` param against the artifact directory (its default). */
export const resolveCwd = (ctx: Pick<EntryContext, "artifactsDir" | "params">): string => {
  const cwd = str(ctx.params, "cwd");
  if (!cwd) return ctx.artifactsDir;
  return isAbsolute(cwd) ? cwd : join(ctx.artifactsDir, cwd);
};

const result = (ctx: EntryContext) => ctx.state.result as ProcessResult;

/** `exec`: run any program once in set-up, then check its exit status, output and duration. */
export const execModule: ModuleDef = {
  key: "exec",
  className: "TestExec",
  summary: "Runs any program once and checks its exit status, output and duration.",
  params: paramSchema(() => ({
    command: required("command", "a string (run by `/bin/sh -c`) or a list (argv, no shell)"),
    name: optional("string", "the report's device name", "exec(<program>)"),
    cwd: optional("string", "working directory, relative to the run's artifact directory", "the artifact directory"),
    env: optional("mapping", "extra environment variables"),
    timeout: optional("number", "seconds before the program is stopped", 60),
    expect_exit: optional("integers", "accepted exit status or statuses", 0),
    stdout_contains: optional("strings", "text stdout must contain (all of a list)"),
    stdout_regex: optional("strings", "regular expressions stdout must match"),
    stdout_not_regex: optional("strings", "regular expressions stdout must not match"),
    stderr_contains: optional("strings", "text stderr must contain"),
    stderr_regex: optional("strings", "regular expressions stderr must match"),
    stderr_not_regex: optional("strings", "regular expressions stderr must not match"),
    max_seconds: optional("number", "the longest the program may take (adds the `duration` case)"),
    save_output: optional("string", "artifact file name for stdout and stderr"),
  })),
  validate: (p) =>
    regexError(p, "stdout_regex", "stdout_not_regex", "stderr_regex", "stderr_not_regex") ??
    (p.save_output !== undefined && !safeArtifactName(String(p.save_output)) ? "parameter 'save_output': expected a plain file name" : undefined),
  deviceName: ({ params }) => str(params, "name") ?? `exec(${programName(command(params) ?? "")})`,
  cases({ params }) {
    const cases: CaseDef[] = [
      {
        name: "exit_code",
        run(ctx) {
          const r = result(ctx);
          const accepted = ints(ctx.params, "expect_exit", [0]);
          if (r.exitCode !== null && accepted.includes(r.exitCode)) return pass();
          return fail(`${describeExit(r)}, expected ${accepted.length === 1 ? accepted[0] : `one of ${accepted.join(", ")}`}`);
        },
      },
    ];
    if (hasOutputChecks(params, "stdout")) cases.push({ name: "stdout", run: (ctx) => checkOutput(ctx.params, "stdout", result(ctx).stdout) });
    if (hasOutputChecks(params, "stderr")) cases.push({ name: "stderr", run: (ctx) => checkOutput(ctx.params, "stderr", result(ctx).stderr) });
    if (num(params, "max_seconds") !== undefined)
      cases.push({
        name: "duration",
        run(ctx) {
          const seconds = result(ctx).durationMs / 1000;
          const max = num(ctx.params, "max_seconds")!;
          return seconds <= max ? pass() : fail(`took ${seconds.toFixed(3)} s, more than ${max} s`);
        },
      });
    return cases;
  },
  async setup(ctx) {
    const p = ctx.params;
    const timeout = num(p, "timeout", 60)!;
    const save = str(p, "save_output");
    const r = await ctx.exec({
      command: command(p)!,
      cwd: resolveCwd(ctx),
      env: envOf(p),
      timeoutMs: timeout * 1000,
      ...(save ? { outputFile: join(ctx.artifactsDir, save) } : {}),
    });
    if (save) ctx.recordArtifact(save);
    ctx.state.result = r;
    // A program that cannot start or times out fails every case.
    if (r.startError || r.timedOut || r.aborted) throw new CaseFailure(describeExit(r, timeout * 1000));
  },
};
