/*
 * labgate's device protocol: every message of the management WebSocket (`/api/v1/devices/ws`) in
 * both directions, one schema each; the hub (src/update/channel/hub.ts) and `labgate agent`
 * (src/agent/) parse and build them from here, and docs/device-protocol.md is generated from them
 * (src/protocol/doc.ts). Other device protocols go beside this folder (src/protocol/mender/,
 * src/protocol/hawkbit/).
 *
 * Written with zod/mini, not zod's classic API: the agent holds these schemas for as long as it runs,
 * and mini's are the same checks in a fraction of the agent's memory. Unknown fields are dropped,
 * not refused (z.object strips them): a newer side may say more than an older one reads.
 */
import * as z from "zod/mini";

/** Prose for the doc and the JSON Schema: `.check(about("..."))`. */
const about = (description: string) => z.describe(description);
const text = (description: string) => z.string().check(about(description));
const nonEmpty = (max: number, description: string) => z.string().check(z.minLength(1), z.maxLength(max), about(description));
const message = <M extends string, S extends z.core.$ZodLooseShape>(method: M, description: string, shape: S) =>
  z.object({ method: z.literal(method), ...shape }).check(about(description));

/** The built-in action every agent offers. */
export const TRIGGER_UPDATE_CHECK = (prefix: string): string => `${prefix}.builtins.trigger_update_check`;

/** An `update_outcome`'s `output` is the last OUTPUT_TAIL bytes of the install command's output. */
export const OUTPUT_TAIL = 4096;

/** The bounds of an `update_outcome`'s fields (longer `from_version` and `reason` are cut to these). */
export const OUTCOME_LIMITS = { id: 128, version: 256, reason: 1024 } as const;

/** The states an update report names. */
export const OUTCOME_STATES = ["installing", "installed", "failed", "aborted"] as const;

/**
 * Capabilities a request needs. The labgate agent reports the first key of each; the reference
 * client's keys are accepted too so that both kinds of device work.
 */
export const CAPABILITY_KEYS = {
  action: ["exec_cmds", "action"],
  filesystem: ["file_transfer", "filesystem"],
  shell: ["shell_connect", "shell"],
} as const;
export type CapabilityKind = keyof typeof CAPABILITY_KEYS;

export function hasCapability(capabilities: Record<string, unknown> | undefined, kind: CapabilityKind): boolean {
  return CAPABILITY_KEYS[kind].some((key) => capabilities?.[key] === true);
}

/** The capability an agent reports when its `tests.enabled` is true. */
export const TESTS_CAPABILITY = "tests";

/** Bounds of a test run's rows: text fields are cut to these many characters; more rows than `rows` fail the device's share. */
export const ROW_LIMITS = { testName: 1024, module: 1024, message: 64 * 1024, name: 1024, output: 8 * 1024, artifactsPerRow: 100, rows: 100_000 } as const;

/*
 * The schemas are built when first used (a frame read, the doc), not when the module loads: a
 * server starts without a device connected, and so builds none of them.
 */
function buildMessages() {
  // ---- shapes inside messages ---------------------------------------------------------------------

  const Notice = z.record(z.string(), z.unknown()).check(about("an object, e.g. {\"message\": \"connected\"}"));

  /** An action as a device lists it: the served names (`action_id`, `action_name`) or the short ones (`id`, `name`). */
  const ActionEntry = z
    .object({
      action_id: z.optional(text("the action's id (or `id`)")),
      id: z.optional(z.string()),
      action_name: z.optional(text("its name (or `name`; default: the id)")),
      name: z.optional(z.string()),
      description: z.optional(z.string()),
      command: z.optional(z.array(z.string()).check(about("argv"))),
      timeout: z.optional(z.number().check(about("seconds; 0: none"))),
    })
    .check(about("an action the device offers"));

  /** A config entry of a device's share, as the gateway numbered it (src/testrun/plan.ts, PlanEntry). */
  const PlanEntry = z.object({
    group: z.string(),
    index: z.int(),
    where: z.string(),
    module: z.string(),
    params: z.record(z.string(), z.unknown()),
    machines: z.array(z.string()),
    paramId: z.string(),
  });

  /** A metadata command of the selection (src/testrun/plan.ts, MetadataCommand). */
  const MetadataCommand = z.object({
    name: z.string(),
    run: z.string(),
    onFail: z.nullable(z.object({ run: z.string(), output: z.string() })),
    superuser: z.nullable(z.enum(["required", "preferred"])),
  });

  // ---- server -> device ---------------------------------------------------------------------------

  const ServerAlert = message("alert", "a notice (`{\"message\": \"connected\"}` on connect)", { alert: Notice });
  const UpdateAbort = message("update_abort", "a deployment was aborted while the device downloaded its target: stop downloading that version, install nothing", {
    version: text("the version whose download stops"),
  });
  const UpdateOutcomeAck = message("update_outcome_ack", "the outcome report `id` is on the server's disk: the device forgets it", { id: text("the report's id") });
  const ValidationFailed = message("validation_failed", "the validation test run of the update the device installed failed (docs/device-tests.md): its rollback_command runs", {
    deployment_id: z.int(),
    version: text("the version installed"),
    run_id: text("the failed test run"),
  });
  const ShellAttach = message("shell_attach", "opens the shell socket of session `uuid` (\"Shell sessions\")", { mac_addr: text("the device's MAC address"), uuid: text("the session id") });
  const ActionListQuery = message("action_list_query", "answers `action_list_update`", {});
  const ActionExec = message("action_exec", "answers `action_exec_control` at once, `action_exec_result` when done", {
    execution_id: text("the execution's id: one seen again is answered with its result, not run twice"),
    action_id: text("the action to run (one of the device's list)"),
  });
  const requestId = () => text("the request's id: the reply names it");
  const runId = () => text("the test run");
  const FileProbe = message("fs_file_probe", "answers `fs_file_probe_reply`", { id: requestId(), file: text("an absolute path") });
  const FileDownload = message("fs_file_download", "uploads the file in parts, answers `fs_file_download_reply` (\"File uploads\")", {
    id: requestId(),
    file: text("an absolute path"),
    upload_urls: z.array(z.string()).check(about("one signed PUT URL per part, in order")),
    part_size: z.int().check(z.positive(), about("bytes per part (the last may be shorter)")),
  });
  const TestRunStart = message("test_run_start", "runs the device's share of a test run (docs/device-tests.md)", {
    run_id: runId(),
    entries: z.array(PlanEntry).check(about("the device's config entries, numbered for it (`test_config<k>`)")),
    modules: z.record(z.string(), z.string()).check(about("script module files the entries use: module key -> YAML text")),
    metadata: z.array(MetadataCommand).check(about("metadata commands of the selection (run first)")),
    pattern: text("a pytest -k style pattern; \"\" for every case"),
    artifacts_max_bytes: z.int().check(about("bytes of artifacts the gateway takes from this device for this run")),
  });
  const TestRunAbort = message("test_run_abort", "stops the run (its processes get SIGTERM, then SIGKILL)", { run_id: runId(), reason: text("why, e.g. `Aborted by user`, `remote_run_timeout`") });

  /** Server -> device, in the doc's order. */
  const SERVER_MESSAGES = [
    ServerAlert,
    ActionListQuery,
    ActionExec,
    FileProbe,
    FileDownload,
    ShellAttach,
    UpdateAbort,
    UpdateOutcomeAck,
    ValidationFailed,
    TestRunStart,
    TestRunAbort,
  ] as const;
  const ServerMessage = z.discriminatedUnion("method", SERVER_MESSAGES);

  // ---- device -> server ---------------------------------------------------------------------------

  const CapabilityReport = message("capability_report", "stores them (kept after a disconnect)", {
    capabilities: z.record(z.string(), z.unknown()).check(about("{name: true}")),
  });
  const ActionListUpdate = message("action_list_update", "replaces the cached action list (entries without an id are left out)", { actions: z.array(ActionEntry) });
  const DeviceAlert = message("alert", "the device's own notice (e.g. that it cannot handle a request): logged", { alert: Notice });
  const ActionExecControl = message("action_exec_control", "`ok`: the device took it; `full`: asked again `queue_full_retry` (5 s) later; anything else refuses it", {
    execution_id: text("the execution's id, from `action_exec`"),
    status: text("`ok`, `full` or `unknown_action`"),
  });
  const ActionExecResult = message("action_exec_result", "the log entry gets its result; the waiting request answers", {
    execution_id: text("the execution's id, from `action_exec`"),
    status_code: z.int().check(about("the exit code; -1 when the timeout killed it")),
    output: z.optional(text("base64 of the combined output")),
  });
  const FileProbeReply = message("fs_file_probe_reply", "`status` 0 and a size: the file exists", {
    id: text("the probe's id"),
    status: z.int().check(about("0: there; else missing")),
    size: z.optional(z.int().check(about("bytes"))),
  });
  const FileDownloadReply = message("fs_file_download_reply", "`status` 0 and one ETag per part, in order: the parts are joined", {
    id: text("the download's id"),
    status: z.int().check(about("0: uploaded; else failed")),
    etags: z.optional(z.array(z.string()).check(about("each part's ETag, in order"))),
  });
  const UpdateProgress = message("update_progress", "the device's progress record; an `update` event (`version` null when no offer is known)", {
    progress: z.number().check(about("download percent, 0..100 (clamped; 100 ends the record)")),
  });
  const UpdateVersion = message("update_version", "the device's stored version; its update is over", { version: nonEmpty(OUTCOME_LIMITS.version, "the version it runs now") });
  const UpdateOutcome = message("update_outcome", "a deployment's device state; acknowledged with `update_outcome_ack` once on disk (\"Update reports\")", {
    id: nonEmpty(OUTCOME_LIMITS.id, "unique per report"),
    state: z.enum(OUTCOME_STATES).check(about("what became of the offer")),
    version: nonEmpty(OUTCOME_LIMITS.version, "the version offered or installed"),
    from_version: z.optional(text("the version it ran")),
    reason: z.optional(text("why it failed, e.g. `checksum mismatch`, `install command exited with 3`, `rolled back`")),
    output: z.optional(text("the last 4 KiB of the install command's output")),
    deployment: z.optional(z.int().check(z.positive(), about("the deployment the answered offer named (absent when it named none)"))),
    attempt: z.optional(z.int().check(z.positive(), about("the attempt the answered offer named"))),
  });
  const TestRunRow = message("test_run_row", "one case's result, as the case ends: a row of the run's report", {
    run_id: runId(),
    start_time: z.number().check(about("epoch milliseconds (the device's clock)")),
    test_name: text("the case's name (cut at 1 KiB)"),
    module: text("the module key (cut at 1 KiB)"),
    duration: z.number().check(z.nonnegative(), about("seconds")),
    message: text("what the case said (cut at 64 KiB)"),
    status: z.enum(["passed", "failed", "skipped"]),
    artifacts: z.array(z.string()).check(about("artifact names, relative to the device's artifact directory")),
    name: z.optional(text("the entry's `name:` in the config")),
    output: z.optional(text("a failed case: the end of its program's output")),
  });
  const TestRunEnd = message("test_run_end", "the share ended (after its artifacts were uploaded), or was refused", {
    run_id: runId(),
    status: z.enum(["finished", "failed", "aborted"]),
    error: z.nullable(z.string()).check(about("why it failed or stopped")),
    warnings: z.array(z.string()).check(about("e.g. artifacts not uploaded")),
  });

  /** Device -> server, in the doc's order. */
  const DEVICE_MESSAGES = [
    CapabilityReport,
    ActionListUpdate,
    DeviceAlert,
    ActionExecControl,
    ActionExecResult,
    FileProbeReply,
    FileDownloadReply,
    UpdateProgress,
    UpdateVersion,
    UpdateOutcome,
    TestRunRow,
    TestRunEnd,
  ] as const;
  const DeviceMessage = z.discriminatedUnion("method", DEVICE_MESSAGES);
  return { ActionEntry, ServerAlert, UpdateAbort, UpdateOutcomeAck, ValidationFailed, ShellAttach, ActionListQuery, ActionExec, FileProbe, FileDownload, TestRunStart, TestRunAbort, SERVER_MESSAGES, ServerMessage, CapabilityReport, ActionListUpdate, DeviceAlert, ActionExecControl, ActionExecResult, FileProbeReply, FileDownloadReply, UpdateProgress, UpdateVersion, UpdateOutcome, TestRunRow, TestRunEnd, DEVICE_MESSAGES, DeviceMessage };
}

type Messages = ReturnType<typeof buildMessages>;
let built: Messages | undefined;
/** Every message schema (`messages().DEVICE_MESSAGES`, `messages().UpdateOutcome`), built on the first call. */
export const messages = (): Messages => (built ??= buildMessages());

export type ActionEntry = z.infer<Messages["ActionEntry"]>;
export type ServerMessage = z.infer<Messages["ServerMessage"]>;
export type TestRunStart = z.infer<Messages["TestRunStart"]>;
export type TestRunAbort = z.infer<Messages["TestRunAbort"]>;
export type DeviceMessage = z.infer<Messages["DeviceMessage"]>;
export type DeviceMethod = DeviceMessage["method"];
export type DeviceMessageOf<M extends DeviceMethod> = Extract<DeviceMessage, { method: M }>;
export type ServerMethod = ServerMessage["method"];
export type UpdateOutcome = z.infer<Messages["UpdateOutcome"]>;
export type TestRunRow = z.infer<Messages["TestRunRow"]>;
export type TestRunEnd = z.infer<Messages["TestRunEnd"]>;
