/*
 * `labgate agent` configuration: a YAML file (agentConfigSchema); flags beat it.
 */
import { existsSync } from "node:fs";
import { networkInterfaces } from "node:os";
import { isAbsolute, relative, resolve } from "node:path";
import * as z from "zod";
import { argv, ConfigError, custom, parseWith, Problem, readYamlMapping, section, shown } from "../config/schema.ts";
import { lookupRunAs, type TestIdentity } from "../testrun/engine/identity.ts";

/** The first non-loopback interface's MAC (the default when mac_address is empty). */
export function defaultMac(): string {
  for (const list of Object.values(networkInterfaces())) {
    for (const nic of list ?? []) if (!nic.internal && nic.mac && nic.mac !== "00:00:00:00:00:00") return nic.mac;
  }
  throw new ConfigError("agent config key mac_address: no network interface with a MAC address found; set mac_address");
}

/** A number of at least `min` (seconds, counts). */
const atLeast = (min: number) => {
  const error = (iss: { input?: unknown }) => `expected a number >= ${min}, got ${shown(iss.input)}`;
  return z.number({ error }).min(min, { error });
};
const text = () => z.string({ error: (iss) => `expected a string, got ${shown(iss.input)}` });

function readServer(value: unknown): string {
  if (typeof value !== "string") throw new Problem(`expected a string, got ${shown(value)}`);
  const server = value.replace(/\/+$/, "");
  if (!server) throw new Problem("required (the gateway's URL, e.g. http://gateway:5000)");
  try {
    const url = new URL(server);
    if (url.protocol !== "http:" && url.protocol !== "https:") throw new Error();
  } catch {
    throw new Problem(`expected an http(s) URL, got ${shown(server)}`);
  }
  return server;
}

/** The configured MAC (aa:bb:cc:dd:ee:ff, any case), or the interface's when empty. */
function readMac(value: unknown): string {
  if (typeof value !== "string") throw new Problem(`expected a string, got ${shown(value)}`);
  if (value === "") return defaultMac();
  const mac = value.toLowerCase();
  if (!/^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/.test(mac)) throw new Problem(`expected six hex pairs separated by colons (aa:bb:cc:dd:ee:ff), got ${shown(value)}`);
  return mac;
}

/** YAML reads 1.10 as the number 1.1: only strings and integers say exactly what was meant. */
function readVersion(value: unknown): string {
  if (typeof value === "string" && value !== "") return value;
  if (typeof value === "number" && Number.isSafeInteger(value)) return String(value);
  throw new Problem(`expected a non-empty string (quote versions such as "1.10"), got ${shown(value)}`);
}

/** `user` or `user:group` that test runs' programs run as: looked up now (an unknown user is exit 2 at start); empty: the agent's own user. */
function readRunAs(value: unknown): TestIdentity | undefined {
  if (typeof value !== "string") throw new Problem(`expected a user name or user:group, got ${shown(value)}`);
  if (value === "") return undefined;
  const found = lookupRunAs(value);
  if ("problem" in found) throw new Problem(found.problem);
  return found;
}

const action = z.object(
  {
    id: text(),
    name: text().optional(),
    command: argv().refine((command) => command.length > 0, { error: "must not be empty" }),
    description: text().prefault(""),
    /** Seconds; 0 = no timeout. */
    timeout: atLeast(0).prefault(0),
  },
  { error: "expected a mapping" },
);

/**
 * The agent's config file: every key, its default and what it accepts. Durations are seconds
 * (fractions allowed, so tests can run fast). Relative paths are resolved by buildAgentConfig.
 */
export const agentConfigSchema = z.strictObject({
  server: custom(readServer).prefault(""),
  /** PEM certificate(s) to trust for an https server, instead of the system's; empty: the system's. */
  ca_file: text().prefault(""),
  data_dir: text().prefault("./agent-data"),
  key_type: z.enum(["rsa", "ed25519"], { error: "expected rsa or ed25519" }).prefault("rsa"),
  mac_address: custom(readMac).prefault(""),
  name: text().prefault(""),
  device_type: text().prefault("generic"),
  software_version: custom(readVersion).prefault("0"),
  metadata: z
    .record(z.string(), z.union([z.string(), z.array(z.string())], { error: "expected a string or a list of strings" }), {
      error: "expected a mapping of key to string or list of strings",
    })
    .prefault({}),
  update_check_interval: atLeast(0.01).prefault(60),
  install_command: argv().prefault([]),
  /** A/B systems: prints the running version (last line); after a restart it tells whether an install took. */
  version_command: argv().prefault([]),
  /** A/B systems: makes the running slot stay (after version_command confirmed it); empty: nothing to do. */
  commit_command: argv().prefault([]),
  /**
   * Runs when the gateway's validation test run of an installed update failed (docs/device-tests.md),
   * e.g. to switch back to the other slot; argv, no shell, "{version}" becomes the update's version; empty: nothing.
   */
  rollback_command: argv().prefault([]),
  file_base_dir: text().prefault("/var/log"),
  actions: z
    .array(action, { error: "expected a list of {id, name, command, description, timeout}" })
    .superRefine((actions, ctx) => {
      const ids = new Set<string>();
      actions.forEach((a, i) => {
        if (!a.id || ids.has(a.id)) ctx.addIssue({ code: "custom", message: "must be present and unique", path: [i, "id"] });
        ids.add(a.id);
      });
    })
    .transform((actions) => actions.map((a) => ({ ...a, name: a.name ?? a.id })))
    .prefault([{ id: "uptime", name: "Uptime", command: ["uptime"], description: "", timeout: 5 }]),
  /** Shell sessions: one process per session, pipes, no PTY. */
  shell: section(
    {
      /** argv of the session process; empty: no shell sessions (shell_connect false). */
      command: argv().prefault([]),
      /** Working directory of the session process; empty: file_base_dir. */
      cwd: text().prefault(""),
      /** Seconds without traffic either way before a session is closed; 0 = never. */
      idle_timeout: atLeast(0).prefault(900),
      /** Sessions at once; more are refused. */
      max_sessions: atLeast(1).transform(Math.floor).prefault(2),
    },
    "expected a mapping {command, cwd, idle_timeout, max_sessions}",
  ),
  /** Test runs the gateway sends (docs/device-tests.md): off unless the device's owner turns them on. */
  tests: section(
    {
      /** false: every test run is refused ("tests.enabled is false"), and the capability report says so. */
      enabled: z.boolean({ error: "expected true or false" }).prefault(false),
      /** Seconds a run may take before the agent aborts it itself; 0 = no limit. */
      max_duration: atLeast(0).prefault(3600),
      /** Where the hardware modules read sysfs, device nodes and firmware (a fake board in tests). */
      sys_root: text().min(1, { error: "expected a directory" }).prefault("/sys"),
      dev_root: text().min(1, { error: "expected a directory" }).prefault("/dev"),
      firmware_root: text().min(1, { error: "expected a directory" }).prefault("/lib/firmware"),
      /**
       * The user (or user:group) the runs' programs and file checks run as, never the agent's own
       * (which holds the device key); the agent needs root or CAP_SETUID and CAP_SETGID for it. Empty: the agent's user.
       */
      run_as: custom(readRunAs).prefault(""),
      /** With run_as: where each run's working directory is made (outside the data dir); empty: `<data_dir>-runs`. */
      work_dir: text().prefault(""),
    },
    "expected a mapping {enabled, max_duration, sys_root, dev_root, firmware_root, run_as, work_dir}",
  ),
  /** Product prefix of metadata keys and the signature header (the server's `prefix`). */
  prefix: text().prefault("svc"),
  /** Backoff between retries (registration, reconnects, downloads): from min, doubling, up to max. */
  retry_min_delay: atLeast(0.001).prefault(1),
  retry_max_delay: atLeast(0.001).prefault(60),
  /** Actions run at once; more are answered `full` and the server asks again. */
  action_concurrency: atLeast(1).transform(Math.floor).prefault(4),
  log_level: z.enum(["error", "warn", "info", "debug"], { error: "expected error, warn, info or debug" }).prefault("info"),
});

export type AgentConfig = z.output<typeof agentConfigSchema>;
export type AgentAction = AgentConfig["actions"][number];
export type AgentShell = AgentConfig["shell"];
export type AgentTests = AgentConfig["tests"];

/** How a message names a key: flags as they are, the rest as `agent config key actions[0].id`. */
const keyName = (path: Array<PropertyKey>) => {
  const key = path.map((p, i) => (typeof p === "number" ? `[${p}]` : `${i ? "." : ""}${String(p)}`)).join("");
  return key.startsWith("-") ? key : `agent config key ${key || "(top level)"}`;
};

/** `tests.work_dir` absolute (default `<data_dir>-runs`), never inside the data dir: the tests' user must reach nothing there. */
function testWorkDir(value: string, dataDir: string, cwd: string): string {
  const dir = value ? resolve(cwd, value) : `${dataDir}-runs`;
  const rel = relative(dataDir, dir);
  if (rel === "" || (!rel.startsWith("..") && !isAbsolute(rel))) throw new ConfigError(`agent config key tests.work_dir: ${dir} is inside the data dir, which test processes must not reach`);
  return dir;
}

/** Validates a parsed config object (unknown keys are errors), filling defaults; relative paths from `cwd`. */
export function buildAgentConfig(input: Record<string, unknown>, cwd = process.cwd()): AgentConfig {
  const config = parseWith(agentConfigSchema, input, keyName);
  const fileBaseDir = resolve(cwd, config.file_base_dir);
  const dataDir = resolve(cwd, config.data_dir);
  return {
    ...config,
    ca_file: config.ca_file ? resolve(cwd, config.ca_file) : "",
    data_dir: dataDir,
    file_base_dir: fileBaseDir,
    // Sessions start where files may be fetched from, unless told otherwise.
    shell: { ...config.shell, cwd: config.shell.cwd ? resolve(cwd, config.shell.cwd) : fileBaseDir },
    tests: {
      ...config.tests,
      sys_root: resolve(cwd, config.tests.sys_root),
      dev_root: resolve(cwd, config.tests.dev_root),
      firmware_root: resolve(cwd, config.tests.firmware_root),
      work_dir: testWorkDir(config.tests.work_dir, dataDir, cwd),
    },
    retry_max_delay: Math.max(config.retry_min_delay, config.retry_max_delay),
  };
}

/** Reads the file (if any) and applies the flags over it. */
export function loadAgentConfig(options: { file?: string; server?: string; dataDir?: string; cwd?: string }): AgentConfig {
  const cwd = options.cwd ?? process.cwd();
  let raw: Record<string, unknown> = {};
  if (options.file) {
    const path = resolve(cwd, options.file);
    if (!existsSync(path)) throw new ConfigError(`--config: file ${path} does not exist`);
    raw = readYamlMapping(path, "agent config file");
  }
  if (options.server !== undefined) raw.server = options.server;
  if (options.dataDir !== undefined) raw.data_dir = options.dataDir;
  return buildAgentConfig(raw, cwd);
}
