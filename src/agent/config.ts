/*
 * `labgate agent` configuration: a YAML file (agentConfigFields); flags beat it. Read with small
 * readers of its own rather than zod, which would be about a fifth of an idle agent's memory (a
 * small board's); the messages are those of the server's config (src/config/schema.ts).
 */
import { existsSync } from "node:fs";
import { networkInterfaces } from "node:os";
import { isAbsolute, relative, resolve } from "node:path";
import { ConfigError, Problem, readYamlMapping, shown } from "../config/read.ts";
import { lookupRunAs, type TestIdentity } from "../testrun/engine/identity.ts";

/** The first non-loopback interface's MAC (the default when mac_address is empty). */
export function defaultMac(): string {
  for (const list of Object.values(networkInterfaces())) {
    for (const nic of list ?? []) if (!nic.internal && nic.mac && nic.mac !== "00:00:00:00:00:00") return nic.mac;
  }
  throw new ConfigError("agent config key mac_address: no network interface with a MAC address found; set mac_address");
}

/** Reads a value for a key: returns what it means, or throws Problem (what is wrong, and where below the key). */
type Reader<T> = (value: unknown) => T;
/** A key of a mapping: its reader, and the value read when the key is absent. */
interface Key<T> {
  read: Reader<T>;
  absent: unknown;
  /** A nested mapping's keys (unknown keys in it are named first, as at the top). */
  keys?: Keys<never>;
}
type Keys<T> = { [K in keyof T]: Key<T[K]> };

const key = <T>(read: Reader<T>, absent: unknown): Key<T> => ({ read, absent });
const isMapping = (value: unknown): value is Record<string, unknown> => typeof value === "object" && value !== null && !Array.isArray(value);

const text: Reader<string> = (value) => {
  if (typeof value !== "string") throw new Problem(`expected a string, got ${shown(value)}`);
  return value;
};
const directory: Reader<string> = (value) => {
  if (text(value) === "") throw new Problem("expected a directory");
  return value as string;
};
/** A number of at least `min` (seconds, counts). */
const atLeast =
  (min: number): Reader<number> =>
  (value) => {
    if (typeof value !== "number" || !Number.isFinite(value) || value < min) throw new Problem(`expected a number >= ${min}, got ${shown(value)}`);
    return value;
  };
const count = (min: number): Reader<number> => (value) => Math.floor(atLeast(min)(value));
const oneOf =
  <const T extends string>(values: readonly T[], what: string): Reader<T> =>
  (value) => {
    if (!values.includes(value as T)) throw new Problem(what);
    return value as T;
  };
const flag: Reader<boolean> = (value) => {
  if (typeof value !== "boolean") throw new Problem("expected true or false");
  return value;
};
/** A list of strings: a command's argv (never run through a shell). */
const argv: Reader<string[]> = (value) => {
  if (Array.isArray(value) && value.every((x) => typeof x === "string")) return value;
  throw new Problem("expected a list of strings (argv, no shell)");
};
const metadataMap: Reader<Record<string, string | string[]>> = (value) => {
  if (!isMapping(value)) throw new Problem("expected a mapping of key to string or list of strings");
  for (const [name, item] of Object.entries(value)) {
    if (typeof item !== "string" && !(Array.isArray(item) && item.every((x) => typeof x === "string"))) throw new Problem("expected a string or a list of strings", [name]);
  }
  return value as Record<string, string | string[]>;
};

/** Each key of `keys` read (absent: its default), with the key added to the path of a Problem. */
function readKeys<T>(keys: Keys<T>, input: Record<string, unknown>): T {
  const out = {} as T;
  for (const name of Object.keys(keys) as Array<keyof T & string>) {
    const { read, absent } = keys[name];
    try {
      out[name] = read(input[name] === undefined ? absent : input[name]);
    } catch (error) {
      throw error instanceof Problem ? new Problem(error.what, [name, ...error.path]) : error;
    }
  }
  return out;
}

/** A section: a mapping of its keys (absent or empty: every default). */
const section = <T>(keys: Keys<T>, what: string): Key<T> => ({
  read: (value) => {
    if (value === null) value = {};
    if (!isMapping(value)) throw new Problem(what);
    return readKeys(keys, value);
  },
  absent: {},
  keys: keys as Keys<never>,
});

/** The path of the first key that `keys` does not have, in `value` or in a section below it. */
function unknownKey(keys: Keys<never>, value: unknown): string[] | undefined {
  if (!isMapping(value)) return undefined;
  const unknown = Object.keys(value).find((name) => !Object.hasOwn(keys, name));
  if (unknown !== undefined) return [unknown];
  for (const [name, { keys: inner }] of Object.entries(keys) as Array<[string, Key<unknown>]>) {
    const below = inner && unknownKey(inner, value[name]);
    if (below) return [name, ...below];
  }
  return undefined;
}

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

export interface AgentAction {
  id: string;
  name: string;
  command: string[];
  description: string;
  /** Seconds; 0 = no timeout. */
  timeout: number;
}

/** An action of the list (keys other than these are ignored). */
const actionKeys: Keys<Omit<AgentAction, "name"> & { name: string | undefined }> = {
  id: key(text, undefined),
  name: key((value) => (value === undefined ? undefined : text(value)), undefined),
  command: key((value) => {
    if (argv(value).length === 0) throw new Problem("must not be empty");
    return value as string[];
  }, undefined),
  description: key(text, ""),
  timeout: key(atLeast(0), 0),
};

function readActions(value: unknown): AgentAction[] {
  if (!Array.isArray(value)) throw new Problem("expected a list of {id, name, command, description, timeout}");
  const actions = value.map((item, i) => {
    if (!isMapping(item)) throw new Problem("expected a mapping", [i]);
    try {
      return readKeys(actionKeys, item);
    } catch (error) {
      throw error instanceof Problem ? new Problem(error.what, [i, ...error.path]) : error;
    }
  });
  const ids = new Set<string>();
  actions.forEach((a, i) => {
    if (!a.id || ids.has(a.id)) throw new Problem("must be present and unique", [i, "id"]);
    ids.add(a.id);
  });
  return actions.map((a) => ({ ...a, name: a.name ?? a.id }));
}

/** Shell sessions: one process per session, pipes, no PTY. */
export interface AgentShell {
  /** argv of the session process; empty: no shell sessions (shell_connect false). */
  command: string[];
  /** Working directory of the session process; empty: file_base_dir. */
  cwd: string;
  /** Seconds without traffic either way before a session is closed; 0 = never. */
  idle_timeout: number;
  /** Sessions at once; more are refused. */
  max_sessions: number;
}

/** Test runs the gateway sends (docs/device-tests.md): off unless the device's owner turns them on. */
export interface AgentTests {
  /** false: every test run is refused ("tests.enabled is false"), and the capability report says so. */
  enabled: boolean;
  /** Seconds a run may take before the agent aborts it itself; 0 = no limit. */
  max_duration: number;
  /** Where the hardware modules read sysfs, device nodes and firmware (a fake board in tests). */
  sys_root: string;
  dev_root: string;
  firmware_root: string;
  /**
   * The user (or user:group) the runs' programs and file checks run as, never the agent's own
   * (which holds the device key); the agent needs root or CAP_SETUID and CAP_SETGID for it. Unset: the agent's user.
   */
  run_as: TestIdentity | undefined;
  /** With run_as: where each run's working directory is made (outside the data dir); empty: `<data_dir>-runs`. */
  work_dir: string;
}

/**
 * The agent's config file: every key, its default and what it accepts. Durations are seconds
 * (fractions allowed, so tests can run fast). Relative paths are resolved by buildAgentConfig.
 */
export interface AgentConfig {
  server: string;
  /** PEM certificate(s) to trust for an https server, instead of the system's; empty: the system's. */
  ca_file: string;
  data_dir: string;
  key_type: "rsa" | "ed25519";
  mac_address: string;
  name: string;
  device_type: string;
  software_version: string;
  metadata: Record<string, string | string[]>;
  update_check_interval: number;
  install_command: string[];
  /** A/B systems: prints the running version (last line); after a restart it tells whether an install took. */
  version_command: string[];
  /** A/B systems: makes the running slot stay (after version_command confirmed it); empty: nothing to do. */
  commit_command: string[];
  /**
   * Runs when the gateway's validation test run of an installed update failed (docs/device-tests.md),
   * e.g. to switch back to the other slot; argv, no shell, "{version}" becomes the update's version; empty: nothing.
   */
  rollback_command: string[];
  file_base_dir: string;
  actions: AgentAction[];
  shell: AgentShell;
  tests: AgentTests;
  /** Product prefix of metadata keys and the signature header (the server's `prefix`). */
  prefix: string;
  /** Backoff between retries (registration, reconnects, downloads): from min, doubling, up to max. */
  retry_min_delay: number;
  retry_max_delay: number;
  /** Actions run at once; more are answered `full` and the server asks again. */
  action_concurrency: number;
  log_level: "error" | "warn" | "info" | "debug";
}

/** Every key of the file, how it is read and its default (read like a value in the file). */
const agentConfigFields: Keys<AgentConfig> = {
  server: key(readServer, ""),
  ca_file: key(text, ""),
  data_dir: key(text, "./agent-data"),
  key_type: key(oneOf(["rsa", "ed25519"], "expected rsa or ed25519"), "rsa"),
  mac_address: key(readMac, ""),
  name: key(text, ""),
  device_type: key(text, "generic"),
  software_version: key(readVersion, "0"),
  metadata: key(metadataMap, {}),
  update_check_interval: key(atLeast(0.01), 60),
  install_command: key(argv, []),
  version_command: key(argv, []),
  commit_command: key(argv, []),
  rollback_command: key(argv, []),
  file_base_dir: key(text, "/var/log"),
  actions: key(readActions, [{ id: "uptime", name: "Uptime", command: ["uptime"], description: "", timeout: 5 }]),
  shell: section<AgentShell>(
    { command: key(argv, []), cwd: key(text, ""), idle_timeout: key(atLeast(0), 900), max_sessions: key(count(1), 2) },
    "expected a mapping {command, cwd, idle_timeout, max_sessions}",
  ),
  tests: section<AgentTests>(
    {
      enabled: key(flag, false),
      max_duration: key(atLeast(0), 3600),
      sys_root: key(directory, "/sys"),
      dev_root: key(directory, "/dev"),
      firmware_root: key(directory, "/lib/firmware"),
      run_as: key(readRunAs, ""),
      work_dir: key(text, ""),
    },
    "expected a mapping {enabled, max_duration, sys_root, dev_root, firmware_root, run_as, work_dir}",
  ),
  prefix: key(text, "svc"),
  retry_min_delay: key(atLeast(0.001), 1),
  retry_max_delay: key(atLeast(0.001), 60),
  action_concurrency: key(count(1), 4),
  log_level: key(oneOf(["error", "warn", "info", "debug"], "expected error, warn, info or debug"), "info"),
};

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
  const unknown = unknownKey(agentConfigFields as Keys<never>, input);
  if (unknown) throw new ConfigError(`${keyName(unknown)}: unknown key`);
  let config: AgentConfig;
  try {
    config = readKeys(agentConfigFields, input);
  } catch (error) {
    throw error instanceof Problem ? new ConfigError(`${keyName(error.path)}: ${error.what}`) : error;
  }
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
