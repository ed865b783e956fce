/*
 * A part of a program that the build makes a bundle of its own (build/build.sh), for the program's
 * bundle to load when it first needs it: in the single executable the asset, compiled as the
 * launcher compiles the programs; beside dist/labgate.cjs the file. Only a bundle calls this
 * (`require` and `__filename` are its module's); from source, the part is a plain import.
 */
import { createRequire } from "node:module";
import { seaAssets } from "../util/sea.ts";
import { compileBundle } from "./bundles.ts";

/** The exports of the build's bundle `name` (compiled and run once per call: callers keep them). */
export function loadBundle(name: string): unknown {
  const sea = seaAssets();
  if (sea) return compileBundle(sea.getAsset(name, "utf8"), name).run(require, process.execPath);
  return createRequire(__filename)(`./${name}`);
}
