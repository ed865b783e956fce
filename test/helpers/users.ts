/** Users the run_as tests run programs as (created with useradd; needs root, as CI runs). */
import { execFileSync } from "node:child_process";

export const RUNNER = "labgate-test-runner";
export const isRoot = process.getuid?.() === 0;

/** The user `name`, created when missing (a parallel test file may have just made it); its uid and gid. */
export function ensureUser(name = RUNNER): { uid: number; gid: number } {
  try {
    execFileSync("useradd", ["--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin", name], { stdio: "ignore" });
  } catch {
    // exists already (exit 9), or made by another test file at the same moment
  }
  return { uid: Number(execFileSync("id", ["-u", name], { encoding: "utf8" })), gid: Number(execFileSync("id", ["-g", name], { encoding: "utf8" })) };
}
