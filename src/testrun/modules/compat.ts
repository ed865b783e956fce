import { join } from "node:path";
import { list, optional, paramSchema } from "./params.ts";
import { CaseFailure, fail, pass, skip, type CaseDef, type EntryContext, type ModuleDef } from "./types.ts";

// The reference's own test modules, so its scenarios run unchanged. Messages are the reference's.

const pyStr = (v: unknown): string => (v === null || v === undefined ? "None" : v === true ? "True" : v === false ? "False" : String(v));

const success: CaseDef = { name: "success", run: () => pass() };
const failure: CaseDef = { name: "failure", run: () => fail("assert False") };
const recordArtifact: CaseDef = {
  name: "record_artifact",
  async run(ctx) {
    await ctx.files.write(join(ctx.artifactsDir, "file.txt"), "test");
    ctx.recordArtifact("file.txt");
    return pass();
  },
};
const configureRunsOnce: CaseDef = {
  name: "configure_runs_once",
  run(ctx) {
    const n = Number(ctx.state.configured ?? 0);
    return n === 1 ? pass() : fail(`AssertionError: configure was run ${n} times!`);
  },
};
const conditionalSkip: CaseDef = {
  name: "conditional_skip",
  run(ctx) {
    const device = ctx.params.device;
    if (list(ctx.params, "skipped_devices").includes(pyStr(device))) return skip("device is in skipped_devices list");
    return device === "skip" ? skip() : pass();
  },
};

const configure = async (ctx: EntryContext) => {
  ctx.state.configured = Number(ctx.state.configured ?? 0) + 1;
};

export const simpleModule: ModuleDef = {
  key: "simple",
  className: "TestSimple",
  summary: "protoplaster's own test module: passes, fails, skips and records an artifact (compatibility, `test_server.compat_modules: true`).",
  compat: true,
  params: paramSchema(() => ({ device: optional("any", "used in the device name and by `conditional_skip`") })),
  deviceName: ({ params }) => ("device" in params ? `simple(${pyStr(params.device)})` : "simple"),
  cases: () => [success, failure, conditionalSkip, recordArtifact, configureRunsOnce],
  setup: configure,
};

export const extendedSimpleModule: ModuleDef = {
  key: "extended_simple",
  className: "TestExtendedSimple",
  summary: "protoplaster's `extended_simple` test module (compatibility, `test_server.compat_modules: true`).",
  compat: true,
  params: paramSchema(() => ({
    // Required by the module's set-up (its message), not at trigger, as in the reference.
    device: optional("any", "used in the device name and by `conditional_skip`; set-up fails without it"),
    skipped_devices: optional("list", "devices for which `conditional_skip` skips", []),
  })),
  deviceName: ({ params }) => `extended_simple(${pyStr(params.device)})`,
  // The subclass's own case first, then the inherited ones.
  cases: () => [conditionalSkip, success, failure, recordArtifact, configureRunsOnce],
  async setup(ctx) {
    if (ctx.params.device === undefined || ctx.params.device === null) throw new CaseFailure("AssertionError: 'device' is an obligatory argument");
    await configure(ctx);
  },
};
