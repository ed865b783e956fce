/*
 * `labgate agent` configuration: a YAML file (agentConfigSchema); flags beat it. Written with
 * zod/mini, not zod's classic API as the server's config is (src/config/schema.ts): the same
 * validation and messages for a fraction of the memory (classic zod's module and schema objects
 * would be most of an idle agent's, on a small board).
 */
import { existsSync } from "node:fs";
import { networkInterfaces } from "node:os";
import { isAbsolute, relative, resolve } from "node:path";
import * as z from "zod/mini";
import { ConfigError, configError, Problem, readYamlMapping, shown } from "../config/read.ts";
import { lookupRunAs, type TestIdentity } from "../testrun/engine/identity.ts";

/** The first non-loopback interface's MAC (the default when mac_address is empty). */
export function defaultMac(): string {
  for (const list of Object.values(networkInterfaces())) {
    for (const nic of list ?? []) if (!nic.internal && nic.mac && nic.mac !== "00:00:00:00:00:00") return nic.mac;
  }
  throw new ConfigError("agent config key mac_address: no network interface with a MAC address found; set mac_address");
}

/** A value read by `read`, which throws Problem for a value that does not fit (a ConfigError passes through). */
const custom = <T>(read: (value: unknown) => T) =>
  z.pipe(
    z.unknown(),
    z.transform((value, ctx): T => {
      try {
        return read(value);
      } catch (error) {
        if (!(error instanceof Problem)) throw error;
        ctx.issues.push({ code: "custom", message: error.what, path: error.path, input: value });
        return z.NEVER;
      }
    }),
  );
/** A number of at least `min` (seconds, counts). */
const atLeast = (min: number) => {
  const error = (iss: { input?: unknown }) => `expected a number >= ${min}, got ${shown(iss.input)}`;
  return z.number({ error }).check(z.gte(min, { error }));
};
const count = (min: number) => z.pipe(atLeast(min), z.transform(Math.floor));
const text = () => z.string({ error: (iss) => `expected a string, got ${shown(iss.input)}` });
const directory = () => text().check(z.minLength(1, { error: "expected a directory" }));
/** A list of strings: a command's argv (never run through a shell). */
const argv = () =>
  custom((value): string[] => {
    if (Array.isArray(value) && value.every((x) => typeof x === "string")) return value;
    throw new Problem("expected a list of strings (argv, no shell)");
  });
/** A section: a mapping of its keys (absent or empty: every default); an unknown key is an error. */
const section = <Shape extends z.core.$ZodLooseShape>(shape: Shape, what: string) =>
  z.prefault(z.pipe(z.transform((value: unknown) => value ?? {}), z.strictObject(shape, { error: (iss) => (iss.code === "invalid_type" ? what : undefined) })), {});

function readServerUrl(value: unknown, path: number[]): string {
  if (typeof value !== "string") throw new Problem(`expected a string, got ${shown(value)}`, path);
  const server = value.replace(/\/+$/, "");
  if (!server) throw new Problem("required (the gateway's URL, e.g. http://gateway:5000)", path);
  try {
    const url = new URL(server);
    if (url.protocol !== "http:" && url.protocol !== "https:") throw new Error();
  } catch {
    throw new Problem(`expected an http(s) URL, got ${shown(server)}`, path);
  }
  return server;
}

/** One gateway URL, or a list of them (the nodes of a cluster, tried in order). */
function readServers(value: unknown): string[] {
  if (!Array.isArray(value)) return [readServerUrl(value, [])];
  if (value.length === 0) throw new Problem("expected at least one URL");
  const urls = value.map((item, i) => readServerUrl(item, [i]));
  const twice = urls.find((url, i) => urls.indexOf(url) !== i);
  if (twice) throw new Problem(`lists ${twice} twice`);
  return urls;
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
    name: z.optional(text()),
    command: argv().check(z.refine((command) => command.length > 0, { error: "must not be empty" })),
    description: z.prefault(text(), ""),
    /** Seconds; 0 = no timeout. */
    timeout: z.prefault(atLeast(0), 0),
  },
  { error: "expected a mapping" },
);

/**
 * The agent's config file: every key, its default and what it accepts. Durations are seconds
 * (fractions allowed, so tests can run fast). Relative paths are resolved by buildAgentConfig.
 */
export const agentConfigSchema = z.strictObject({
  /** The gateway's URL, or the URLs of a cluster's nodes: the agent uses the first that works (servers.ts). */
  server: z.prefault(custom(readServers), ""),
  /** PEM certificate(s) to trust for an https server, instead of the system's; empty: the system's. */
  ca_file: z.prefault(text(), ""),
  data_dir: z.prefault(text(), "./agent-data"),
  key_type: z.prefault(z.enum(["rsa", "ed25519"], { error: "expected rsa or ed25519" }), "rsa"),
  mac_address: z.prefault(custom(readMac), ""),
  name: z.prefault(text(), ""),
  device_type: z.prefault(text(), "generic"),
  software_version: z.prefault(custom(readVersion), "0"),
  metadata: z.prefault(
    z.record(z.string(), z.union([z.string(), z.array(z.string())], { error: "expected a string or a list of strings" }), {
      error: "expected a mapping of key to string or list of strings",
    }),
    {},
  ),
  update_check_interval: z.prefault(atLeast(0.01), 60),
  install_command: z.prefault(argv(), []),
  /**
   * PEM public keys (files) an update must be signed by: with any, only a Mender artifact whose
   * manifest signature verifies with one of them, and whose every payload matches the manifest, is
   * installed (docs/update-server.md, "Signed artifacts"); empty: updates are not checked.
   */
  verify_keys: z.prefault(argv(), []),
  /**
   * What a delta the gateway offers applies to: a file (the running image), or a command (argv)
   * that prints its path, e.g. the inactive partition's source; empty: deltas are not used.
   */
  delta_base: z.prefault(z.union([text(), argv()], { error: "expected a file name or a command (a list of strings)" }), ""),
  /** A/B systems: prints the running version (last line); after a restart it tells whether an install took. */
  version_command: z.prefault(argv(), []),
  /** A/B systems: makes the running slot stay (after version_command confirmed it); empty: nothing to do. */
  commit_command: z.prefault(argv(), []),
  /**
   * Runs when the gateway's validation test run of an installed update failed (docs/device-tests.md),
   * e.g. to switch back to the other slot; argv, no shell, "{version}" becomes the update's version; empty: nothing.
   */
  rollback_command: z.prefault(argv(), []),
  file_base_dir: z.prefault(text(), "/var/log"),
  actions: z.prefault(
    z.pipe(
      z.array(action, { error: "expected a list of {id, name, command, description, timeout}" }).check(
        z.superRefine((actions, ctx) => {
          const ids = new Set<string>();
          actions.forEach((a, i) => {
            if (!a.id || ids.has(a.id)) ctx.addIssue({ code: "custom", message: "must be present and unique", path: [i, "id"], input: a.id });
            ids.add(a.id);
          });
        }),
      ),
      z.transform((actions) => actions.map((a) => ({ ...a, name: a.name ?? a.id }))),
    ),
    [{ id: "uptime", name: "Uptime", command: ["uptime"], description: "", timeout: 5 }],
  ),
  /** Shell sessions: one process per session, pipes, no PTY. */
  shell: section(
    {
      /** argv of the session process; empty: no shell sessions (shell_connect false). */
      command: z.prefault(argv(), []),
      /** Working directory of the session process; empty: file_base_dir. */
      cwd: z.prefault(text(), ""),
      /** Seconds without traffic either way before a session is closed; 0 = never. */
      idle_timeout: z.prefault(atLeast(0), 900),
      /** Sessions at once; more are refused. */
      max_sessions: z.prefault(count(1), 2),
    },
    "expected a mapping {command, cwd, idle_timeout, max_sessions}",
  ),
  /** Test runs the gateway sends (docs/device-tests.md): off unless the device's owner turns them on. */
  tests: section(
    {
      /** false: every test run is refused ("tests.enabled is false"), and the capability report says so. */
      enabled: z.prefault(z.boolean({ error: "expected true or false" }), false),
      /** Seconds a run may take before the agent aborts it itself; 0 = no limit. */
      max_duration: z.prefault(atLeast(0), 3600),
      /** Where the hardware modules read sysfs, device nodes and firmware (a fake board in tests). */
      sys_root: z.prefault(directory(), "/sys"),
      dev_root: z.prefault(directory(), "/dev"),
      firmware_root: z.prefault(directory(), "/lib/firmware"),
      /**
       * The user (or user:group) the runs' programs and file checks run as, never the agent's own
       * (which holds the device key); the agent needs root or CAP_SETUID and CAP_SETGID for it. Empty: the agent's user.
       */
      run_as: z.prefault(custom(readRunAs), ""),
      /** With run_as: where each run's working directory is made (outside the data dir); empty: `<data_dir>-runs`. */
      work_dir: z.prefault(text(), ""),
    },
    "expected a mapping {enabled, max_duration, sys_root, dev_root, firmware_root, run_as, work_dir}",
  ),
  /** Product prefix of metadata keys and the signature header (the server's `prefix`). */
  prefix: z.prefault(text(), "svc"),
  /** Backoff between retries (registration, reconnects, downloads): from min, doubling, up to max. */
  retry_min_delay: z.prefault(atLeast(0.001), 1),
  retry_max_delay: z.prefault(atLeast(0.001), 60),
  /** Actions run at once; more are answered `full` and the server asks again. */
  action_concurrency: z.prefault(count(1), 4),
  log_level: z.prefault(z.enum(["error", "warn", "info", "debug"], { error: "expected error, warn, info or debug" }), "info"),
});

/** `server` is the first URL (the one the agent prefers); `servers` all of them, in order. */
export type AgentConfig = Omit<z.output<typeof agentConfigSchema>, "server"> & { server: string; servers: string[] };
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
  const result = z.safeParse(agentConfigSchema, input);
  if (!result.success) throw configError(result.error.issues, keyName);
  const config = result.data;
  const fileBaseDir = resolve(cwd, config.file_base_dir);
  const dataDir = resolve(cwd, config.data_dir);
  return {
    ...config,
    server: config.server[0],
    servers: config.server,
    ca_file: config.ca_file ? resolve(cwd, config.ca_file) : "",
    verify_keys: config.verify_keys.map((file) => resolve(cwd, file)),
    delta_base: typeof config.delta_base === "string" && config.delta_base !== "" ? resolve(cwd, config.delta_base) : config.delta_base,
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
