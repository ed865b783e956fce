/**
 * The ways a test's program outlives the command that started it, and how a test finds what is
 * left of them: each escape runs with a mark (a variable, and its shell's command line), and
 * /proc is searched for it (run-processes.test.ts, devices-run-as.test.ts).
 */
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";

/** Whether an unprivileged user (nobody) may make a user and pid namespace here. */
const USER_NAMESPACES = spawnSync("setpriv", ["--reuid", "65534", "--regid", "65534", "--clear-groups", "--", "unshare", "-Ur", "-p", "-f", "true"], { stdio: "ignore" }).status === 0;

/** The ways a program outlives the command that started it; each leaves a `sleep 300` (or a loop) behind. */
export const ESCAPES: Array<[string, string]> = [
  ["a background job", "sleep 300 >/dev/null 2>&1 &"],
  ["setsid", "setsid sleep 300 >/dev/null 2>&1 &"],
  ["nohup", "nohup sleep 300 >/dev/null 2>&1 &"],
  ["a double fork", "(sleep 300 >/dev/null 2>&1 &)"],
  // Where this machine refuses unprivileged user namespaces, the step shows that it does (and leaves a job behind all the same).
  USER_NAMESPACES ? ["a user and pid namespace", "unshare -Ur -p -f sleep 300 >/dev/null 2>&1 &"] : ["a user and pid namespace (refused here)", "unshare -Ur -p -f true 2>/dev/null && exit 1; sleep 300 >/dev/null 2>&1 &"],
  ["a watcher loop", "while true; do sleep 1; done >/dev/null 2>&1 &"],
];

export const newMark = () => `lgmark${randomBytes(6).toString("hex")}`;

/** One exec step of a config (the command JSON-quoted: a YAML double-quoted scalar). */
export const step = (name: string, command: string, check = "") => `  - exec:\n      name: ${name}\n      command: ${JSON.stringify(command)}\n${check}`;

/** A step that prints how many processes of its user carry `mark` (the mark is assembled, so that its own command line does not). */
export const aliveStep = (name: string, mark: string) =>
  step(name, `m=lgmark; m=$m${mark.slice(6)}; n=0; for p in /proc/[0-9]*; do c=$(tr '\\0' ' ' < $p/cmdline 2>/dev/null; tr '\\0' ' ' < $p/environ 2>/dev/null); case "$c" in *"$m"*) n=$((n+1));; esac; done; echo "alive $n"`, '      stdout_regex: "^alive [1-9]"\n');

/** Pids of live processes whose command line or environment holds `mark`. */
export function marked(mark: string): number[] {
  const found: number[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    let text = "";
    for (const part of ["cmdline", "environ"]) {
      try {
        text += readFileSync(`/proc/${name}/${part}`, "latin1");
      } catch {
        // gone, or a kernel thread
      }
    }
    if (text.includes(mark)) found.push(Number(name));
  }
  return found;
}

/** Kills what a failing test left (so that one failure does not leave sleeps behind). */
export function sweep(marks: string[]): void {
  for (const mark of marks) {
    for (const pid of marked(mark)) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // gone
      }
    }
  }
}

/** Exec steps that start each escape with its mark, each followed by a step that sees it alive. */
export const escapeSteps = (escapes: Array<[string, string]>, marks: string[]) =>
  escapes.map(([, escape], i) => step(`start${i}`, `export LABGATE_MARK=${marks[i]}; ${escape}\nsleep 0.3`) + aliveStep(`alive${i}`, marks[i])).join("");
