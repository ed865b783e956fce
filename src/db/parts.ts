/*
 * The parts of the CLI that a build makes bundles of their own (build/build.sh), loaded when first
 * needed; from source each is a plain import. As the agent's parts (src/agent/parts.ts).
 */
import { POSTGRES_BUNDLE } from "../launch/bundles.ts";
import { loadBundle } from "../launch/lazy-bundle.ts";

/** Defined (true) in the CLI's bundle: esbuild then leaves the import below out. */
declare const LABGATE_MAIN_BUNDLE: true | undefined;

/** PostgreSQL's side of the data layer (./postgres-part.ts). */
export const loadPostgresPart = (): Promise<typeof import("./postgres-part.ts")> =>
  typeof LABGATE_MAIN_BUNDLE === "undefined" ? import("./postgres-part.ts") : Promise.resolve().then(() => loadBundle(POSTGRES_BUNDLE) as typeof import("./postgres-part.ts"));
