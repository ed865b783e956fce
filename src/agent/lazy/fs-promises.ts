// The agent's bundles get this for node:fs/promises (../bundle.ts): Node's fs/promises loads
// readline's interface and the REPL's history with it into an idle agent's memory, and the agent
// needs it only for what it does on request (downloads, file transfers, test runs). Each function
// loads the module at its first call; a name that is not here fails the agent's build.
import type * as FsPromises from "node:fs/promises";
import { lazyFunction } from "./builtin.ts";

const lazy = <K extends keyof typeof FsPromises>(name: K) => lazyFunction<typeof FsPromises, K>("node:fs/promises", name);

export const access = lazy("access");
export const copyFile = lazy("copyFile");
export const cp = lazy("cp");
export const lstat = lazy("lstat");
export const mkdir = lazy("mkdir");
export const open = lazy("open");
export const readdir = lazy("readdir");
export const readlink = lazy("readlink");
export const realpath = lazy("realpath");
export const rename = lazy("rename");
export const rm = lazy("rm");
export const stat = lazy("stat");
export const unlink = lazy("unlink");
