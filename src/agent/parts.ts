/*
 * The parts of the agent that a build makes bundles of their own (build/build.sh), so that the
 * agent's bundle, whose whole source V8 keeps as long as the agent runs, holds none of them; each
 * is loaded when first needed. From source each is a plain import.
 */
import { AGENT_CONFIG_BUNDLE, AGENT_TESTS_BUNDLE } from "../launch/bundles.ts";
import { loadBundle } from "../launch/lazy-bundle.ts";

/** Defined (true) in the agent's bundles (./bundle.ts): esbuild then leaves each import below out. */
declare const LABGATE_AGENT_BUNDLE: true | undefined;

/** Reading the config at start (./config-reader.ts). */
export const loadConfigReader = (): Promise<typeof import("./config-reader.ts")> =>
  typeof LABGATE_AGENT_BUNDLE === "undefined" ? import("./config-reader.ts") : Promise.resolve().then(() => loadBundle(AGENT_CONFIG_BUNDLE) as typeof import("./config-reader.ts"));

/** The test-run engine, with the first test run (./test-engine.ts). */
export const loadTestEngine = (): Promise<typeof import("./test-engine.ts")> =>
  typeof LABGATE_AGENT_BUNDLE === "undefined" ? import("./test-engine.ts") : Promise.resolve().then(() => loadBundle(AGENT_TESTS_BUNDLE) as typeof import("./test-engine.ts"));
