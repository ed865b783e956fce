// The agent's bundles get this for node:child_process (../bundle.ts): Node's child_process loads
// dgram and the socket list with it into an idle agent's memory, and the agent starts programs only on
// request (actions, installs, shells, test runs). Each function loads the module at its first call;
// a name that is not here fails the agent's build.
import type * as ChildProcess from "node:child_process";
import { lazyFunction } from "./builtin.ts";

const lazy = <K extends keyof typeof ChildProcess>(name: K) => lazyFunction<typeof ChildProcess, K>("node:child_process", name);

export const execFileSync = lazy("execFileSync");
export const spawn = lazy("spawn");
export const spawnSync = lazy("spawnSync");
