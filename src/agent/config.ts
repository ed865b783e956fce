/*
 * `labgate agent` configuration (contract.md, "The device agent"). YAML file; flags beat it.
 * Durations are seconds (fractions allowed, so tests can run fast).
 */
import { existsSync } from "node:fs";
import { networkInterfaces } from "node:os";
import { resolve } from "node:path";
import { ConfigError, readYamlMapping } from "../config/config.ts";

export interface AgentAction {
  id: string;
  name: string;
  command: string[];
  description: string;
  /** Seconds; 0 = no timeout. */
  timeout: number;
}

/** Shell sessions (update-server.md 13.4): one process per session, pipes, no PTY. */
export interface AgentShell {
  /** argv of the session process; empty: no shell sessions (shell_connect false). */
  command: string[];
  /** Working directory of the session process. */
  cwd: string;
  /** Seconds without traffic either way before a session is closed; 0 = never. */
  idle_timeout: number;
  /** Sessions at once; more are refused. */
  max_sessions: number;
}

/** Test runs the gateway sends (docs/device-tests.md): off unless the device's owner turns them on. */
export interface AgentTests {
  /** false: every test run is refused ("tests.enabled is false"), and the capability says so. */
  enabled: boolean;
  /** Seconds a run may take before the agent aborts it itself; 0 = no limit. */
  max_duration: number;
  /** Where the hardware modules read sysfs, device nodes and firmware (absolute; a fake board in tests). */
  sys_root: string;
  dev_root: string;
  firmware_root: string;
}

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
  file_base_dir: string;
  actions: AgentAction[];
  shell: AgentShell;
  /** Product prefix of metadata keys and the signature header (the server's `prefix`). */
  prefix: string;
  /** Backoff between retries (registration, reconnects, downloads): from min, doubling, up to max. */
  retry_min_delay: number;
  retry_max_delay: number;
  /** Actions run at once; more are answered `full` and the server asks again. */
  action_concurrency: number;
  /** Test runs from the gateway. */
  tests: AgentTests;
  log_level: "error" | "warn" | "info" | "debug";
}

const fail = (key: string, what: string): never => {
  throw new ConfigError(`${key.startsWith("-") ? key : `agent config key ${key}`}: ${what}`);
};
const str = (v: unknown, key: string): string => (typeof v === "string" ? v : fail(key, `expected a string, got ${JSON.stringify(v)}`));
const num = (v: unknown, key: string, min = 0): number =>
  typeof v === "number" && Number.isFinite(v) && v >= min ? v : fail(key, `expected a number >= ${min}, got ${JSON.stringify(v)}`);
const argv = (v: unknown, key: string): string[] =>
  Array.isArray(v) && v.every((x) => typeof x === "string") ? (v as string[]) : fail(key, "expected a list of strings (argv, no shell)");

const DEFAULTS = {
  server: "",
  ca_file: "",
  data_dir: "./agent-data",
  key_type: "rsa",
  mac_address: "",
  name: "",
  device_type: "generic",
  software_version: "0",
  metadata: {},
  update_check_interval: 60,
  install_command: [],
  file_base_dir: "/var/log",
  actions: [{ id: "uptime", name: "Uptime", command: ["uptime"], description: "", timeout: 5 }],
  shell: {},
  prefix: "svc",
  retry_min_delay: 1,
  retry_max_delay: 60,
  action_concurrency: 4,
  tests: {},
  log_level: "info",
};

/** The first non-loopback interface's MAC (contract: the default when mac_address is empty). */
export function defaultMac(): string {
  for (const list of Object.values(networkInterfaces())) {
    for (const nic of list ?? []) if (!nic.internal && nic.mac && nic.mac !== "00:00:00:00:00:00") return nic.mac;
  }
  throw new ConfigError("agent config key mac_address: no network interface with a MAC address found; set mac_address");
}

const SHELL_DEFAULTS = { command: [], cwd: "", idle_timeout: 900, max_sessions: 2 };
const TESTS_DEFAULTS = { enabled: false, max_duration: 3600, sys_root: "/sys", dev_root: "/dev", firmware_root: "/lib/firmware" };

function buildTests(input: unknown, cwd: string): AgentTests {
  if (input === null || typeof input !== "object" || Array.isArray(input)) return fail("tests", "expected a mapping {enabled, max_duration, sys_root, dev_root, firmware_root}");
  for (const key of Object.keys(input)) if (!(key in TESTS_DEFAULTS)) fail(`tests.${key}`, "unknown key");
  const v = { ...TESTS_DEFAULTS, ...(input as Record<string, unknown>) };
  if (typeof v.enabled !== "boolean") fail("tests.enabled", "expected true or false");
  const dir = (key: "sys_root" | "dev_root" | "firmware_root") => resolve(cwd, str(v[key], `tests.${key}`) || fail(`tests.${key}`, "expected a directory"));
  return { enabled: v.enabled as boolean, max_duration: num(v.max_duration, "tests.max_duration"), sys_root: dir("sys_root"), dev_root: dir("dev_root"), firmware_root: dir("firmware_root") };
}

function buildShell(input: unknown, cwd: string, fileBaseDir: string): AgentShell {
  if (input === null || typeof input !== "object" || Array.isArray(input)) return fail("shell", "expected a mapping {command, cwd, idle_timeout, max_sessions}");
  for (const key of Object.keys(input)) if (!(key in SHELL_DEFAULTS)) fail(`shell.${key}`, "unknown key");
  const v = { ...SHELL_DEFAULTS, ...(input as Record<string, unknown>) };
  const dir = str(v.cwd, "shell.cwd");
  return {
    command: argv(v.command, "shell.command"),
    // Sessions start where files may be fetched from, unless told otherwise.
    cwd: dir ? resolve(cwd, dir) : fileBaseDir,
    idle_timeout: num(v.idle_timeout, "shell.idle_timeout"),
    max_sessions: Math.floor(num(v.max_sessions, "shell.max_sessions", 1)),
  };
}

/** The configured MAC (aa:bb:cc:dd:ee:ff, any case), or the interface's when empty. */
function macAddress(value: string): string {
  if (value === "") return defaultMac();
  const mac = value.toLowerCase();
  return /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/.test(mac) ? mac : fail("mac_address", `expected six hex pairs separated by colons (aa:bb:cc:dd:ee:ff), got ${JSON.stringify(value)}`);
}

/** YAML reads 1.10 as the number 1.1: only strings and integers say exactly what was meant. */
function softwareVersion(value: unknown): string {
  if (typeof value === "string" && value !== "") return value;
  if (typeof value === "number" && Number.isSafeInteger(value)) return String(value);
  return fail("software_version", `expected a non-empty string (quote versions such as "1.10"), got ${JSON.stringify(value)}`);
}

/** Validates a parsed config object (unknown keys are errors), filling defaults. */
export function buildAgentConfig(input: Record<string, unknown>, cwd = process.cwd()): AgentConfig {
  for (const key of Object.keys(input)) if (!(key in DEFAULTS)) fail(key, "unknown key");
  const v = { ...DEFAULTS, ...input } as Record<string, unknown>;
  const server = str(v.server, "server").replace(/\/+$/, "");
  if (!server) fail("server", "required (the gateway's URL, e.g. http://gateway:5000)");
  try {
    const url = new URL(server);
    if (url.protocol !== "http:" && url.protocol !== "https:") throw new Error();
  } catch {
    fail("server", `expected an http(s) URL, got ${JSON.stringify(server)}`);
  }
  const keyType = str(v.key_type, "key_type");
  if (keyType !== "rsa" && keyType !== "ed25519") fail("key_type", "expected rsa or ed25519");
  const metadata = v.metadata;
  if (!metadata || typeof metadata !== "object" || Array.isArray(metadata)) fail("metadata", "expected a mapping of key to string or list of strings");
  for (const [key, value] of Object.entries(metadata as object)) {
    if (typeof value !== "string" && !(Array.isArray(value) && value.every((x) => typeof x === "string"))) fail(`metadata.${key}`, "expected a string or a list of strings");
  }
  if (!Array.isArray(v.actions)) fail("actions", "expected a list of {id, name, command, description, timeout}");
  const ids = new Set<string>();
  const actions = (v.actions as unknown[]).map((item, i): AgentAction => {
    const at = `actions[${i}]`;
    if (!item || typeof item !== "object" || Array.isArray(item)) return fail(at, "expected a mapping");
    const a = item as Record<string, unknown>;
    const id = str(a.id, `${at}.id`);
    if (!id || ids.has(id)) fail(`${at}.id`, "must be present and unique");
    ids.add(id);
    const command = argv(a.command, `${at}.command`);
    if (command.length === 0) fail(`${at}.command`, "must not be empty");
    return { id, name: a.name === undefined ? id : str(a.name, `${at}.name`), command, description: a.description === undefined ? "" : str(a.description, `${at}.description`), timeout: a.timeout === undefined ? 0 : num(a.timeout, `${at}.timeout`) };
  });
  const shell = buildShell(v.shell, cwd, resolve(cwd, str(v.file_base_dir, "file_base_dir")));
  const logLevel = str(v.log_level, "log_level");
  if (!["error", "warn", "info", "debug"].includes(logLevel)) fail("log_level", "expected error, warn, info or debug");
  const min = num(v.retry_min_delay, "retry_min_delay", 0.001);
  const caFile = str(v.ca_file, "ca_file");
  return {
    server,
    ca_file: caFile ? resolve(cwd, caFile) : "",
    data_dir: resolve(cwd, str(v.data_dir, "data_dir")),
    key_type: keyType as "rsa" | "ed25519",
    mac_address: macAddress(str(v.mac_address, "mac_address")),
    name: str(v.name, "name"),
    device_type: str(v.device_type, "device_type"),
    software_version: softwareVersion(v.software_version),
    metadata: metadata as Record<string, string | string[]>,
    update_check_interval: num(v.update_check_interval, "update_check_interval", 0.01),
    install_command: argv(v.install_command, "install_command"),
    file_base_dir: resolve(cwd, str(v.file_base_dir, "file_base_dir")),
    actions,
    shell,
    prefix: str(v.prefix, "prefix"),
    retry_min_delay: min,
    retry_max_delay: Math.max(min, num(v.retry_max_delay, "retry_max_delay", 0.001)),
    action_concurrency: Math.max(1, Math.floor(num(v.action_concurrency, "action_concurrency", 1))),
    tests: buildTests(v.tests, cwd),
    log_level: logLevel as AgentConfig["log_level"],
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
