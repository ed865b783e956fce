import { existsSync, readFileSync } from "node:fs";
import { relative, resolve, isAbsolute } from "node:path";
import { parse as parseYaml } from "yaml";
import { parseReportColumns, type ReportColumn } from "../testrun/engine/report.ts";

/** A bad config file, flag or environment value; the CLI exits with code 2 and this message. */
export class ConfigError extends Error {}

export type LogLevel = "error" | "warn" | "info" | "debug";
export type LogFormat = "text" | "json";

export interface NodeTarget {
  url: string;
  token?: string;
}

export interface Config {
  listen: { host: string; port: number };
  data_dir: string;
  public_url: string;
  prefix: string;
  log_level: LogLevel;
  log_format: LogFormat;
  /** PEM files; both empty: plain HTTP. */
  tls: { cert_file: string; key_file: string };
  console: {
    /** Seconds a console login lasts (its session cookie and token). */
    session_ttl: number;
    /** Seconds the first start's admin token (data/admin.token) lasts. */
    admin_token_ttl: number;
  };
  database: {
    /** Seconds after which a change is folded into a new image (a checkpoint). */
    checkpoint_interval: number;
    /** Journal bytes that start a checkpoint sooner. */
    checkpoint_bytes: number;
  };
  update_server: {
    download_link_ttl: number;
    device_token_ttl: number;
    pending_registration_ttl: number;
    /** Device channel (update-server.md 13, 11, 12): seconds; fractions allowed (tests). */
    ws_ping_interval: number;
    device_reply_timeout: number;
    action_timeout_margin: number;
    action_max_wait: number;
    queue_full_retry: number;
    file_transfer_timeout: number;
    file_transfer_min_rate: number;
    /** Seconds a device has to attach to a new shell session (13.4). */
    shell_attach_timeout: number;
    /** Seconds without an update check offer or progress report after which a progress record is dropped (17 item 11). */
    progress_idle_timeout: number;
    /** Device log entries kept per device; a batch that goes over drops the oldest (15.2, issue 13). */
    device_logs_per_device: number;
    /** Most entries one `POST /api/v1/logs` batch may carry (400 above). */
    device_logs_max_batch: number;
  };
  /**
   * Deliberate differences from the reference update server, one key each, safe by default; a site
   * whose reference tools must work unchanged turns one off (README, "The reference's tools").
   */
  compat: {
    /** Approving a registration that replaces a device's key needs `"confirm_key_change": true`. */
    key_change_confirmation: boolean;
    /** A package upload needs `<prefix>.hardware.devtype` as well as the version. */
    package_device_type_required: boolean;
    /** Action log status of a finished action: `words` (success, error) or `exit_code` ("0", "-1"). */
    action_log_status: "words" | "exit_code";
    /** Event streams carry comment lines (`:ok` at the start, a keep-alive every 15 s). */
    sse_comments: boolean;
    /** Device auth requests must carry a timestamp within this many seconds of now, each accepted once; 0: not checked. */
    auth_timestamp_window: number;
  };
  /** The audit log (src/audit/audit.ts): the oldest entries go past either bound. */
  audit: {
    retention_days: number;
    max_rows: number;
  };
  test_server: {
    auth: "token" | "none";
    api_variant: "A" | "B";
    compat_modules: boolean;
    nodes: Record<string, NodeTarget>;
    /** Browser origins allowed to call the test-run API (CORS); empty: no CORS headers (1.1, 17.2). */
    cors_origins: string[];
    /** A protoplaster-style device list (`name: address` per line), merged into `nodes` at load (11.1). */
    nodes_file: string;
    /** Largest test config accepted by upload, in bytes (413 above). */
    max_config_bytes: number;
    /** Seconds a metadata command may run (test-run-server.md 2.7). */
    metadata_timeout: number;
    /** Seconds a node's run may take before the orchestrator aborts it (11.4). */
    remote_run_timeout: number;
    /** CSV and JSON report columns: `seed`, `reference` or a list, resolved to names (8.2). */
    report_columns: ReportColumn[];
    /**
     * An existing protoplaster install's directories (`--test-dir`, `--reports-dir`,
     * `--artifacts-dir`), absolute after loading; empty: under the data dir (runs/paths.ts).
     */
    configs_dir: string;
    reports_dir: string;
    artifacts_dir: string;
    /**
     * Where the hardware modules find sysfs, device nodes and firmware (docs/modules.md): a
     * config's `/sys/...`, `/dev/...` and firmware names are read below these, so configs stay
     * portable and tests use fake trees. Absolute after loading.
     */
    sys_root: string;
    dev_root: string;
    firmware_root: string;
  };
}

type Validator = (value: unknown, key: string) => unknown;
type Schema = { [key: string]: { default: unknown; check: Validator } | Schema };

const fail = (key: string, what: string): never => {
  const name = key.startsWith("-") || /^[A-Z_]+$/.test(key) ? key : `config key ${key}`;
  throw new ConfigError(`${name}: ${what}`);
};

const string: Validator = (v, key) => (typeof v === "string" ? v : fail(key, `expected a string, got ${JSON.stringify(v)}`));
const boolean: Validator = (v, key) => (typeof v === "boolean" ? v : fail(key, `expected true or false, got ${JSON.stringify(v)}`));
const oneOf =
  (...values: string[]): Validator =>
  (v, key) =>
    typeof v === "string" && values.includes(v) ? v : fail(key, `expected one of ${values.join(", ")}, got ${JSON.stringify(v)}`);
const integer =
  (min: number, max = Number.MAX_SAFE_INTEGER): Validator =>
  (v, key) =>
    typeof v === "number" && Number.isInteger(v) && v >= min && v <= max
      ? v
      : fail(key, `expected an integer from ${min} to ${max}, got ${JSON.stringify(v)}`);

/** Parses `HOST:PORT` (IPv6 as `[::1]:5000`). */
export function parseListen(value: unknown, key = "listen"): { host: string; port: number } {
  if (typeof value !== "string") return fail(key, `expected HOST:PORT, got ${JSON.stringify(value)}`);
  const match = /^(?:\[([0-9a-fA-F:.]+)\]|([^:\s]+)):(\d{1,5})$/.exec(value);
  const port = match ? Number(match[3]) : NaN;
  if (!match || port > 65535) return fail(key, `expected HOST:PORT with a port from 0 to 65535, got ${JSON.stringify(value)}`);
  return { host: match[1] ?? match[2], port };
}

const positive: Validator = (v, key) =>
  typeof v === "number" && Number.isFinite(v) && v > 0 ? v : fail(key, `expected a number greater than 0, got ${JSON.stringify(v)}`);

const url: Validator = (v, key) => {
  if (typeof v !== "string") return fail(key, "expected a URL string");
  if (v === "") return v;
  try {
    const parsed = new URL(v);
    if (parsed.protocol !== "http:" && parsed.protocol !== "https:") throw new Error();
  } catch {
    return fail(key, `expected an http(s) URL, got ${JSON.stringify(v)}`);
  }
  return v.replace(/\/+$/, "");
};

/**
 * A node address as protoplaster's device list normalises it (test-run-server.md 11.1):
 * `http://` when there is no scheme, port 5000 when there is none (`10.0.1.2` ->
 * `http://10.0.1.2:5000`).
 */
const nodeUrl: Validator = (v, key) => {
  if (typeof v !== "string" || v.trim() === "") return fail(key, "a node needs a url");
  let address = v.trim();
  if (!address.includes("://")) address = `http://${address}`;
  const authority = /^[a-z][a-z0-9+.-]*:\/\/([^/?#]*)/i.exec(address)?.[1] ?? "";
  if (!/:\d+$/.test(authority.replace(/^\[[^\]]*\]/, ""))) address = address.replace(authority, `${authority}:5000`);
  return url(address, key);
};

/** Names that mean this node itself (11.1): never a configured node. */
const RESERVED_NODE_NAMES = new Set(["localhost", "Local device"]);

/** Adds `name -> target` to `out` with the device list's conflict rules (11.1); the same pair again is a no-op. */
function addNode(out: Record<string, NodeTarget>, name: string, target: NodeTarget, at: string): void {
  if (RESERVED_NODE_NAMES.has(name)) fail(at, `'${name}' is reserved for this node`);
  const known = Object.hasOwn(out, name) ? out[name] : undefined;
  if (known && known.url !== target.url) fail(at, `node '${name}' is already defined with ${known.url}`);
  const other = Object.entries(out).find(([n, t]) => n !== name && t.url === target.url);
  if (other) fail(at, `${target.url} is already defined as node '${other[0]}'`);
  if (!known) out[name] = target;
  else if (target.token !== undefined) known.token = target.token;
}

/** `name: address` or `name: {url, token}` entries, validated into `out`. */
function readNodes(v: unknown, key: string, out: Record<string, NodeTarget>): Record<string, NodeTarget> {
  if (v === null || typeof v !== "object" || Array.isArray(v)) return fail(key, "expected a mapping of node name to URL or {url, token}");
  for (const [name, target] of Object.entries(v)) {
    const at = `${key}.${name}`;
    let node: NodeTarget;
    if (typeof target === "string") {
      node = { url: nodeUrl(target, at) as string };
    } else if (target && typeof target === "object" && !Array.isArray(target)) {
      const extra = Object.keys(target).filter((k) => k !== "url" && k !== "token");
      if (extra.length) fail(`${at}.${extra[0]}`, "unknown key");
      const t = target as { url?: unknown; token?: unknown };
      node = { url: nodeUrl(t.url, `${at}.url`) as string, ...(t.token === undefined ? {} : { token: string(t.token, `${at}.token`) as string }) };
    } else {
      return fail(at, "expected a URL or {url, token}");
    }
    addNode(out, name, node, at);
  }
  return out;
}

const nodes: Validator = (v, key) => readNodes(v, key, {});

/** Browser origins (`http://host:port`, no path) or `*`. */
const origins: Validator = (v, key) => {
  if (!Array.isArray(v)) return fail(key, "expected a list of origins such as http://lab-ui:8080, or [\"*\"]");
  return v.map((o, i) => {
    if (o === "*") return o;
    let parsed: URL | undefined;
    try {
      parsed = typeof o === "string" ? new URL(o) : undefined;
    } catch {
      parsed = undefined;
    }
    if (!parsed || (parsed.protocol !== "http:" && parsed.protocol !== "https:") || parsed.origin !== o.replace(/\/$/, "")) {
      return fail(`${key}.${i}`, `expected an origin such as http://lab-ui:8080 (scheme, host, optional port), got ${JSON.stringify(o)}`);
    }
    return parsed.origin;
  });
};

const reportColumns: Validator = (v, key) => {
  const columns = parseReportColumns(v);
  return typeof columns === "string" ? fail(key, columns) : columns;
};

const schema: Schema = {
  listen: { default: "0.0.0.0:5000", check: (v, key) => parseListen(v, key) },
  data_dir: { default: "./data", check: string },
  public_url: { default: "", check: url },
  prefix: {
    default: "svc",
    check: (v, key) => (typeof v === "string" && /^[a-z][a-z0-9]{0,15}$/.test(v) ? v : fail(key, "expected 1-16 lowercase letters or digits, starting with a letter")),
  },
  log_level: { default: "info", check: oneOf("error", "warn", "info", "debug") },
  log_format: { default: "text", check: oneOf("text", "json") },
  tls: {
    cert_file: { default: "", check: string },
    key_file: { default: "", check: string },
  },
  console: {
    session_ttl: { default: 28800, check: integer(60, 30 * 86400) },
    admin_token_ttl: { default: 7 * 86400, check: integer(60, 365 * 86400) },
  },
  database: {
    checkpoint_interval: { default: 60, check: positive },
    checkpoint_bytes: { default: 8 * 1048576, check: integer(4096) },
  },
  update_server: {
    download_link_ttl: { default: 3600, check: integer(1) },
    device_token_ttl: { default: 300, check: integer(10) },
    pending_registration_ttl: { default: 7 * 86400, check: integer(60) },
    ws_ping_interval: { default: 25, check: positive },
    device_reply_timeout: { default: 30, check: positive },
    action_timeout_margin: { default: 10, check: positive },
    action_max_wait: { default: 7200, check: positive },
    queue_full_retry: { default: 5, check: positive },
    file_transfer_timeout: { default: 60, check: positive },
    file_transfer_min_rate: { default: 1048576, check: positive },
    shell_attach_timeout: { default: 5, check: positive },
    progress_idle_timeout: { default: 86400, check: positive },
    device_logs_per_device: { default: 1000, check: integer(1, 1_000_000) },
    device_logs_max_batch: { default: 500, check: integer(1, 100_000) },
  },
  compat: {
    key_change_confirmation: { default: true, check: boolean },
    package_device_type_required: { default: true, check: boolean },
    action_log_status: { default: "words", check: oneOf("words", "exit_code") },
    sse_comments: { default: true, check: boolean },
    auth_timestamp_window: { default: 600, check: integer(0) },
  },
  audit: {
    retention_days: { default: 365, check: integer(1, 100 * 365) },
    max_rows: { default: 1_000_000, check: integer(1000, 100_000_000) },
  },
  test_server: {
    auth: { default: "token", check: oneOf("token", "none") },
    api_variant: { default: "A", check: oneOf("A", "B") },
    compat_modules: { default: false, check: boolean },
    nodes: { default: {}, check: nodes },
    nodes_file: { default: "", check: string },
    cors_origins: { default: [], check: origins },
    max_config_bytes: { default: 1048576, check: integer(1024, 64 * 1048576) },
    metadata_timeout: { default: 60, check: integer(1, 86400) },
    remote_run_timeout: { default: 86400, check: integer(1, 30 * 86400) },
    report_columns: { default: "seed", check: reportColumns },
    configs_dir: { default: "", check: string },
    reports_dir: { default: "", check: string },
    artifacts_dir: { default: "", check: string },
    sys_root: { default: "/sys", check: string },
    dev_root: { default: "/dev", check: string },
    firmware_root: { default: "/lib/firmware", check: string },
  },
};

const isLeaf = (entry: Schema[string]): entry is { default: unknown; check: Validator } => "check" in entry && typeof entry.check === "function";

/** Validates `input` against `section`, filling defaults; unknown keys are errors. */
function build(section: Schema, input: unknown, path: string): Record<string, unknown> {
  if (input === undefined || input === null) input = {};
  if (typeof input !== "object" || Array.isArray(input)) return fail(path || "(top level)", "expected a mapping");
  const given = input as Record<string, unknown>;
  for (const key of Object.keys(given)) if (!(key in section)) fail(path ? `${path}.${key}` : key, "unknown key");
  const out: Record<string, unknown> = {};
  for (const [key, entry] of Object.entries(section)) {
    const at = path ? `${path}.${key}` : key;
    if (isLeaf(entry)) out[key] = entry.check(given[key] === undefined ? entry.default : given[key], at);
    else out[key] = build(entry, given[key], at);
  }
  return out;
}

export const defaultConfig = (): Config => build(schema, {}, "") as unknown as Config;

/** Reads a YAML file whose top level must be a mapping (empty: `{}`); `what` names it in messages. */
export function readYamlMapping(path: string, what: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (error) {
    throw new ConfigError(`cannot read ${what} ${path}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`);
  }
  let raw: unknown;
  try {
    raw = parseYaml(text) ?? {};
  } catch (error) {
    throw new ConfigError(`${what} ${path} is not valid YAML: ${(error as Error).message.split("\n")[0]}`);
  }
  if (typeof raw !== "object" || Array.isArray(raw)) throw new ConfigError(`${what} ${path}: expected a mapping at the top level`);
  return raw as Record<string, unknown>;
}

export interface ConfigSources {
  /** Explicit --config path; must exist. */
  file?: string;
  /** Directory in which `appliance.config.yaml` is looked up when no file is given. */
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  flags?: { dataDir?: string; listen?: string };
}

export interface LoadedConfig {
  config: Config;
  /** The file that was read, if any. */
  file: string | undefined;
}

/** Keys that moved, under their old names too (an installed config file is never rewritten). */
const MOVED: Array<[from: [string, string], to: [string, string]]> = [[["update_server", "auth_timestamp_window"], ["compat", "auth_timestamp_window"]]];

/** `raw` with each moved key at its new place; both places with different values is an error. */
function movedKeys(raw: Record<string, unknown>): Record<string, unknown> {
  const out = { ...raw };
  for (const [[fromSection, key], [toSection, toKey]] of MOVED) {
    const from = out[fromSection];
    if (!from || typeof from !== "object" || Array.isArray(from) || !(key in from)) continue;
    const { [key]: value, ...rest } = from as Record<string, unknown>;
    const to = out[toSection];
    const target = to && typeof to === "object" && !Array.isArray(to) ? (to as Record<string, unknown>) : {};
    if (toKey in target && target[toKey] !== value) fail(`${fromSection}.${key}`, `moved to ${toSection}.${toKey}, which the file also sets; keep one`);
    out[fromSection] = rest;
    out[toSection] = { ...target, [toKey]: value };
  }
  return out;
}

/** Flags beat environment variables, which beat the file, which beats the defaults. */
export function loadConfig(sources: ConfigSources = {}): LoadedConfig {
  const env = sources.env ?? process.env;
  const cwd = sources.cwd ?? process.cwd();
  const explicit = sources.file ?? env.LABGATE_CONFIG;
  const file = explicit ? resolve(cwd, explicit) : existsSync(resolve(cwd, "appliance.config.yaml")) ? resolve(cwd, "appliance.config.yaml") : undefined;

  const raw = file ? readYamlMapping(file, "config file") : {};

  // Overrides are checked under their own names so that the message names what the user typed.
  const layered = movedKeys(raw);
  if (env.LABGATE_DATA_DIR) layered.data_dir = env.LABGATE_DATA_DIR;
  if (env.LABGATE_LISTEN) layered.listen = (parseListen(env.LABGATE_LISTEN, "LABGATE_LISTEN"), env.LABGATE_LISTEN);
  if (sources.flags?.dataDir !== undefined) layered.data_dir = sources.flags.dataDir;
  if (sources.flags?.listen !== undefined) layered.listen = (parseListen(sources.flags.listen, "--listen"), sources.flags.listen);

  const config = build(schema, layered, "") as unknown as Config;
  if (!config.data_dir) throw new ConfigError("config key data_dir: must not be empty");
  config.data_dir = resolve(cwd, config.data_dir);
  const { tls } = config;
  if (Boolean(tls.cert_file) !== Boolean(tls.key_file)) fail(tls.cert_file ? "tls.key_file" : "tls.cert_file", "give both tls.cert_file and tls.key_file, or neither");
  if (tls.cert_file) {
    tls.cert_file = resolve(cwd, tls.cert_file);
    tls.key_file = resolve(cwd, tls.key_file);
  }
  if (config.test_server.nodes_file) config.test_server.nodes = readNodesFile(resolve(cwd, config.test_server.nodes_file), config.test_server.nodes);
  resolveTestrunDirs(config, cwd);
  return { config, file };
}

/**
 * Makes the test-run directories absolute (relative to where labgate starts) and refuses any two
 * that are the same or nested: configs, reports and run artifacts must not see each other's files.
 */
function resolveTestrunDirs(config: Config, cwd: string): void {
  const ts = config.test_server;
  const defaults = { configs_dir: "configs", reports_dir: "reports", artifacts_dir: "artifacts" } as const;
  const keys = Object.keys(defaults) as (keyof typeof defaults)[];
  for (const key of keys) if (ts[key]) ts[key] = resolve(cwd, ts[key]);
  for (const key of ["sys_root", "dev_root", "firmware_root"] as const) ts[key] = ts[key] ? resolve(cwd, ts[key]) : fail(`test_server.${key}`, "expected a directory");
  const effective = (key: keyof typeof defaults) => ts[key] || resolve(config.data_dir, "testrun", defaults[key]);
  const inside = (a: string, b: string) => {
    const rel = relative(b, a);
    return rel === "" || (!rel.startsWith("..") && !isAbsolute(rel));
  };
  for (const a of keys) {
    for (const b of keys) {
      if (a !== b && (ts[a] || ts[b]) && inside(effective(a), effective(b))) {
        fail(`test_server.${a}`, `${effective(a)} is inside the ${b.replace("_dir", "")} directory ${effective(b)}; the three directories must be separate`);
      }
    }
  }
}

/** Reads `test_server.nodes_file` (protoplaster's `--external-devices` format) into `nodes`, with the conflict rules of 11.1. */
function readNodesFile(path: string, nodes: Record<string, NodeTarget>): Record<string, NodeTarget> {
  const key = "config key test_server.nodes_file";
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (error) {
    throw new ConfigError(`${key}: cannot read ${path}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`);
  }
  let raw: unknown;
  try {
    raw = parseYaml(text) ?? {};
  } catch (error) {
    throw new ConfigError(`${key}: ${path} is not valid YAML: ${(error as Error).message.split("\n")[0]}`);
  }
  return readNodes(raw, `test_server.nodes_file[${path}]`, { ...nodes });
}
