/*
 * The server's configuration: the file (appliance.config.yaml), environment variables and flags.
 * `configSchema` is the one description of every key (its default and what it accepts); the
 * pieces it is written with, and ConfigError, are in schema.ts (shared with the agent's config).
 */
import { existsSync, readFileSync } from "node:fs";
import { relative, resolve, isAbsolute } from "node:path";
import { parse as parseYaml } from "yaml";
import * as z from "zod";
import { parseReportColumns, type ReportColumn } from "../testrun/engine/report.ts";
import { RUN_AS_FORM } from "../testrun/engine/identity.ts";
import { labSection } from "./lab.ts";
import { LOG_FORMATS, LOG_LEVELS } from "../util/log.ts";
import { redactedUrl } from "../db/url.ts";
import { boolean, ConfigError, custom, integer, oneOf, parseWith, positive, Problem, readYamlMapping, section, shown, string } from "./schema.ts";

export { ConfigError, readYamlMapping };

/** How a message names a key: flags (`--listen`) and environment variables as they are, the rest as `config key a.b`. */
const keyName = (key: string) => (key.startsWith("-") || /^[A-Z_]+$/.test(key) ? key : `config key ${key}`);
const fail = (key: string, what: string): never => {
  throw new ConfigError(`${keyName(key)}: ${what}`);
};

export interface NodeTarget {
  url: string;
  token?: string;
}

function readListen(value: unknown): { host: string; port: number } {
  if (typeof value !== "string") throw new Problem(`expected HOST:PORT, got ${shown(value)}`);
  const match = /^(?:\[([0-9a-fA-F:.]+)\]|([^:\s]+)):(\d{1,5})$/.exec(value);
  const port = match ? Number(match[3]) : NaN;
  if (!match || port > 65535) throw new Problem(`expected HOST:PORT with a port from 0 to 65535, got ${shown(value)}`);
  return { host: (match[1] ?? match[2])!, port };
}

/** Parses `HOST:PORT` (IPv6 as `[::1]:5000`); `key` names it in the error. */
export function parseListen(value: unknown, key = "listen"): { host: string; port: number } {
  try {
    return readListen(value);
  } catch (error) {
    if (!(error instanceof Problem)) throw error;
    return fail(key, error.what);
  }
}

/** A list of file names (relative to the working directory). */
function readFiles(value: unknown): string[] {
  if (Array.isArray(value) && value.every((x) => typeof x === "string" && x !== "")) return value;
  throw new Problem(`expected a list of file names, got ${shown(value)}`);
}

function readUrl(value: unknown): string {
  if (typeof value !== "string") throw new Problem("expected a URL string");
  if (value === "") return value;
  try {
    const parsed = new URL(value);
    if (parsed.protocol !== "http:" && parsed.protocol !== "https:") throw new Error();
  } catch {
    throw new Problem(`expected an http(s) URL, got ${shown(value)}`);
  }
  return value.replace(/\/+$/, "");
}

/** `database.url`: empty (the embedded database), or a PostgreSQL URL; what is shown of a bad one never holds its password. */
function readDatabaseUrl(value: unknown): string {
  if (typeof value !== "string") throw new Problem("expected a postgres:// or postgresql:// URL");
  if (value === "") return value;
  let parsed: URL | undefined;
  try {
    parsed = new URL(value);
  } catch {
    parsed = undefined;
  }
  if (!parsed || (parsed.protocol !== "postgres:" && parsed.protocol !== "postgresql:") || !parsed.hostname) {
    throw new Problem(`expected postgres://USER:PASSWORD@HOST:PORT/DB (or postgresql://), got ${parsed ? JSON.stringify(redactedUrl(value)) : "a string that is not a URL"}`);
  }
  return value;
}

/** Checks a database URL given as `name` (a flag, an environment variable) as `database.url` is checked. */
export function checkDatabaseUrl(url: string, name: string): string {
  try {
    return readDatabaseUrl(url);
  } catch (error) {
    if (!(error instanceof Problem)) throw error;
    throw new ConfigError(`${name} (database.url): ${error.what}`);
  }
}

/**
 * A node address as protoplaster's device list normalises it: `http://` when there is no scheme,
 * port 5000 when there is none (`10.0.1.2` -> `http://10.0.1.2:5000`).
 */
function readNodeUrl(value: unknown): string {
  if (typeof value !== "string" || value.trim() === "") throw new Problem("a node needs a url");
  let address = value.trim();
  if (!address.includes("://")) address = `http://${address}`;
  const authority = /^[a-z][a-z0-9+.-]*:\/\/([^/?#]*)/i.exec(address)?.[1] ?? "";
  if (!/:\d+$/.test(authority.replace(/^\[[^\]]*\]/, ""))) address = address.replace(authority, `${authority}:5000`);
  return readUrl(address);
}

/** Names that mean this node itself: never a configured node. */
const RESERVED_NODE_NAMES = new Set(["localhost", "Local device"]);

/** Adds `name -> target` to `out` with the device list's conflict rules; the same pair again is a no-op. */
function addNode(out: Record<string, NodeTarget>, name: string, target: NodeTarget): void {
  if (RESERVED_NODE_NAMES.has(name)) throw new Problem(`'${name}' is reserved for this node`, [name]);
  const known = Object.hasOwn(out, name) ? out[name] : undefined;
  if (known && known.url !== target.url) throw new Problem(`node '${name}' is already defined with ${known.url}`, [name]);
  const other = Object.entries(out).find(([n, t]) => n !== name && t.url === target.url);
  if (other) throw new Problem(`${target.url} is already defined as node '${other[0]}'`, [name]);
  if (!known) out[name] = target;
  else if (target.token !== undefined) known.token = target.token;
}

/** `name: address` or `name: {url, token}` entries, added to `out`. */
function readNodes(value: unknown, out: Record<string, NodeTarget>): Record<string, NodeTarget> {
  if (value === null || typeof value !== "object" || Array.isArray(value)) throw new Problem("expected a mapping of node name to URL or {url, token}");
  const below = (path: Array<string | number>, read: () => NodeTarget): NodeTarget => {
    try {
      return read();
    } catch (error) {
      throw error instanceof Problem ? new Problem(error.what, [...path, ...error.path]) : error;
    }
  };
  for (const [name, target] of Object.entries(value)) {
    let node: NodeTarget;
    if (typeof target === "string") {
      node = below([name], () => ({ url: readNodeUrl(target) }));
    } else if (target && typeof target === "object" && !Array.isArray(target)) {
      const extra = Object.keys(target).filter((k) => k !== "url" && k !== "token");
      if (extra.length) throw new Problem("unknown key", [name, extra[0]!]);
      const t = target as { url?: unknown; token?: unknown };
      const url = below([name, "url"], () => ({ url: readNodeUrl(t.url) })).url;
      if (t.token !== undefined && typeof t.token !== "string") throw new Problem(`expected a string, got ${shown(t.token)}`, [name, "token"]);
      node = { url, ...(t.token === undefined ? {} : { token: t.token as string }) };
    } else {
      throw new Problem("expected a URL or {url, token}", [name]);
    }
    addNode(out, name, node);
  }
  return out;
}

/** A credential: a string, and a message about a bad one never shows it. */
const secret = () =>
  custom((value): string => {
    if (typeof value === "string") return value;
    throw new Problem("expected a string (its value is not shown)");
  });

/** Browser origins (`http://host:port`, no path) or `*`. */
function readOrigins(value: unknown): string[] {
  if (!Array.isArray(value)) throw new Problem('expected a list of origins such as http://lab-ui:8080, or ["*"]');
  return value.map((o, i) => {
    if (o === "*") return o;
    let parsed: URL | undefined;
    try {
      parsed = typeof o === "string" ? new URL(o) : undefined;
    } catch {
      parsed = undefined;
    }
    if (!parsed || (parsed.protocol !== "http:" && parsed.protocol !== "https:") || parsed.origin !== String(o).replace(/\/$/, "")) {
      throw new Problem(`expected an origin such as http://lab-ui:8080 (scheme, host, optional port), got ${shown(o)}`, [i]);
    }
    return parsed.origin;
  });
}

function readReportColumns(value: unknown): ReportColumn[] {
  const columns = parseReportColumns(value);
  if (typeof columns === "string") throw new Problem(columns);
  return columns;
}

/**
 * The server's config file (appliance.config.yaml): every key, its default and what it accepts.
 * The one description of the config: `Config` is its output type, and errors name the key.
 */
export const configSchema = z.strictObject({
  listen: custom(readListen).prefault("0.0.0.0:5000"),
  data_dir: string().prefault("./data"),
  public_url: custom(readUrl).prefault(""),
  prefix: z
    .string({ error: "expected 1-16 lowercase letters or digits, starting with a letter" })
    .regex(/^[a-z][a-z0-9]{0,15}$/, { error: "expected 1-16 lowercase letters or digits, starting with a letter" })
    .prefault("svc"),
  log_level: oneOf(...LOG_LEVELS).prefault("info"),
  log_format: oneOf(...LOG_FORMATS).prefault("text"),
  /**
   * After a burst (a fan-out, a start, traffic at full rate) V8 is asked to give the freed heap
   * back for a while (src/util/memory-relief.ts); only on Node 24, the executable's runtime.
   */
  memory_relief: boolean().prefault(true),
  /** PEM files; both empty: plain HTTP. */
  tls: section({
    cert_file: string().prefault(""),
    key_file: string().prefault(""),
  }),
  console: section({
    /** Seconds a console login lasts (its session cookie and token). */
    session_ttl: integer(60, 30 * 86400).prefault(28800),
    /** Seconds the first start's admin token (data/admin.token) lasts. */
    admin_token_ttl: integer(60, 365 * 86400).prefault(7 * 86400),
  }),
  database: section({
    /** PostgreSQL (docs/database.md); empty: the embedded database in the data dir. */
    url: custom(readDatabaseUrl).prefault(""),
    /** Embedded engine: seconds after which a change is folded into a new image (a checkpoint). */
    checkpoint_interval: positive().prefault(60),
    /** Journal bytes that start a checkpoint sooner. */
    checkpoint_bytes: integer(4096).prefault(8 * 1048576),
  }),
  /** Where package objects, test-run reports and artifacts are kept (docs/storage.md). */
  storage: section({
    driver: oneOf("local", "s3").prefault("local"),
    local: section({
      /** Package objects; empty: `<data_dir>/storage` (absolute after loading; src/storage/open.ts). */
      dir: string().prefault(""),
    }),
    /** An S3-compatible object store; read only with `driver: s3`. */
    s3: section({
      /** `https://s3.eu-west-1.amazonaws.com`, `http://minio.lab:9000`; empty: AWS's endpoint of `region`. */
      endpoint: custom(readUrl).prefault(""),
      region: string().prefault("us-east-1"),
      bucket: string().prefault(""),
      access_key_id: secret().prefault(""),
      secret_access_key: secret().prefault(""),
      /** Bucket in the path (`endpoint/bucket/key`), as most S3-compatible servers want; false: in the host name. */
      path_style: boolean().prefault(true),
      /** Download links are labgate's, streaming from the store (devices that cannot reach it); false: presigned URLs of the store. */
      proxy: boolean().prefault(false),
    }),
  }),
  /** Several servers on one PostgreSQL database (docs/cluster.md); nothing of it runs on the embedded database. */
  cluster: section({
    /** This node's name among the others (empty: the host name); a node started again under its name takes its place. */
    node_name: string()
      .regex(/^([A-Za-z0-9][A-Za-z0-9._-]{0,62})?$/, "expected 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit")
      .prefault(""),
    /** How the other nodes reach this one (its shells and file downloads go through it); required once a second node runs. */
    advertise_url: custom(readUrl).prefault(""),
  }),
  update_server: section({
    download_link_ttl: integer(1).prefault(3600),
    device_token_ttl: integer(10).prefault(300),
    pending_registration_ttl: integer(60).prefault(7 * 86400),
    /** Device channel: seconds; fractions allowed (tests). */
    ws_ping_interval: positive().prefault(25),
    device_reply_timeout: positive().prefault(30),
    action_timeout_margin: positive().prefault(10),
    action_max_wait: positive().prefault(7200),
    queue_full_retry: positive().prefault(5),
    file_transfer_timeout: positive().prefault(60),
    file_transfer_min_rate: positive().prefault(1048576),
    /** Seconds a device has to attach to a new shell session. */
    shell_attach_timeout: positive().prefault(5),
    /** Seconds without an update check offer or progress report after which a progress record is dropped. */
    progress_idle_timeout: positive().prefault(86400),
    /** Device log entries kept per device; a batch that goes over drops the oldest. */
    device_logs_per_device: integer(1, 1_000_000).prefault(1000),
    /** Most entries one `POST /api/v1/logs` batch may carry (400 above). */
    device_logs_max_batch: integer(1, 100_000).prefault(500),
    /** Bytes of log entries (UTF-8) kept per device; a batch that goes over drops the oldest. */
    device_log_bytes_per_device: integer(4096, 1024 * 1048576).prefault(1048576),
    /** Log entries a device may send per minute (429 above). */
    device_logs_per_minute: integer(1, 1_000_000).prefault(1000),
    /** Actions waiting for one device (queued or sent, no result yet); more are 429. */
    max_queued_actions: integer(1, 100_000).prefault(100),
    /** Offline devices one fan-out may queue an action for; the rest of them get 429. */
    max_queued_per_request: integer(1, 10_000).prefault(1000),
    /** Pending registrations in total (from every address); more are 429. */
    max_pending_registrations: integer(1, 10_000_000).prefault(10_000),
    /** Deltas (docs/update-server.md, "Deltas"): `manual`, made on request; `auto`, also on upload, from the versions devices of its type run. */
    deltas: oneOf("manual", "auto").prefault("manual"),
    /** Largest package (base or target) a delta is made of. */
    delta_max_bytes: integer(1).prefault(4 * 1024 * 1048576),
    /** Signed Mender artifacts (docs/update-server.md, "Signed artifacts"): uploads are checked against these PEM public keys. */
    signing: section(
      {
        keys: custom(readFiles).prefault([]),
        /** Only packages signed by one of the keys are stored; the rest are refused (400). */
        required: boolean().prefault(false),
      },
      "expected a mapping {keys, required}",
    ),
    /** hawkBit's Direct Device Integration API for SWUpdate and RAUC (docs/update-server.md, "hawkBit DDI"). */
    ddi: section({
      /** The tenant in the devices' paths (`/{tenant}/controller/v1/...`). */
      tenant: string().regex(/^[A-Za-z0-9_-]{1,64}$/, "expected 1 to 64 letters, digits, _ or -").prefault("DEFAULT"),
      /** Seconds a target sleeps between polls (its `config.polling.sleep`). */
      polling_interval: integer(1, 86_399).prefault(60),
    }),
  }),
  /**
   * Deliberate differences from the reference update server, one key each, safe by default; a site
   * whose reference tools must work unchanged turns one off (README, "The reference's tools").
   */
  compat: section({
    /** Approving a registration that replaces a device's key needs `"confirm_key_change": true`. */
    key_change_confirmation: boolean().prefault(true),
    /** A package upload needs `<prefix>.hardware.devtype` as well as the version. */
    package_device_type_required: boolean().prefault(true),
    /** Action log status of a finished action: `words` (success, error) or `exit_code` ("0", "-1"). */
    action_log_status: oneOf("words", "exit_code").prefault("words"),
    /** Event streams carry comment lines (`:ok` at the start, a keep-alive every 15 s). */
    sse_comments: boolean().prefault(true),
    /** Device auth requests must carry a timestamp within this many seconds of now, each accepted once; 0: not checked. */
    auth_timestamp_window: integer(0).prefault(600),
  }),
  /** The audit log (src/audit/audit.ts, refusals.ts): the oldest entries go past either bound. */
  audit: section({
    retention_days: integer(1, 100 * 365).prefault(365),
    /** Rows of changes kept; refusals have a budget of their own (max_refusal_rows). */
    max_rows: integer(1000, 100_000_000).prefault(1_000_000),
    /** How often (seconds) retention looks for entries past the bounds. */
    retention_interval: integer(1, 86_400).prefault(600),
    /** Rows of refusals (auth.refused, login.failure) kept besides max_rows: they never push out the rows of changes. */
    max_refusal_rows: integer(100, 100_000_000).prefault(100_000),
    /** Seconds of a refusal window: one auth.refused row per client, actor and route in each, with a count. */
    refusal_window: integer(1, 3600).prefault(60),
    /** Clients and routes counted apart per window; the refusals of more share one row. */
    refusal_keys: integer(10, 100_000).prefault(1000),
  }),
  test_server: section({
    auth: oneOf("token", "none").prefault("token"),
    api_variant: oneOf("A", "B").prefault("A"),
    compat_modules: boolean().prefault(false),
    nodes: custom((value) => readNodes(value, {})).prefault({}),
    /** A protoplaster-style device list (`name: address` per line), merged into `nodes` at load. */
    nodes_file: string().prefault(""),
    /** Browser origins allowed to call the test-run API (CORS); empty: no CORS headers. */
    cors_origins: custom(readOrigins).prefault([]),
    /** Largest test config accepted by upload, in bytes (413 above). */
    max_config_bytes: integer(1024, 64 * 1048576).prefault(1048576),
    /** Seconds a metadata command may run. */
    metadata_timeout: integer(1, 86400).prefault(60),
    /** Seconds a node's run (or a device's share of a run) may take before it is aborted. */
    remote_run_timeout: integer(1, 30 * 86400).prefault(86400),
    /** Seconds a run on managed devices waits for an offline device to connect before its cases fail (docs/device-tests.md). */
    device_wait: positive().prefault(60),
    /** Seconds a run's share waits for its device while other runs hold it (queued behind them) before its cases fail. */
    board_wait: positive().prefault(3600),
    /** Bytes of artifacts a run takes from one device (413 above). */
    device_artifacts_max_bytes: integer(0).prefault(256 * 1048576),
    /** Artifact files (and the directories they make) a run takes from one device (413 above). */
    device_artifacts_max_files: integer(1, 10_000_000).prefault(1000),
    /** Bytes of report rows (as written to the CSV) a run takes from one device; past them its share fails. */
    device_report_max_bytes: integer(1024, 1024 * 1048576 * 1024).prefault(64 * 1048576),
    /** CSV and JSON report columns: `seed`, `reference` or a list, resolved to names. */
    report_columns: custom(readReportColumns).prefault("seed"),
    /**
     * An existing protoplaster install's directories (`--test-dir`, `--reports-dir`,
     * `--artifacts-dir`), absolute after loading; empty: under the data dir (src/testrun/paths.ts).
     */
    configs_dir: string().prefault(""),
    reports_dir: string().prefault(""),
    artifacts_dir: string().prefault(""),
    /**
     * Where the hardware modules find sysfs, device nodes and firmware (docs/modules.md): a
     * config's `/sys/...`, `/dev/...` and firmware names are read below these, so configs stay
     * portable and tests use fake trees. Absolute after loading.
     */
    sys_root: string().prefault("/sys"),
    dev_root: string().prefault("/dev"),
    firmware_root: string().prefault("/lib/firmware"),
    /** `user` or `user:group` that test processes run as; empty: the server's own user (src/testrun/engine/identity.ts). */
    run_as: string().prefault(""),
    /** With run_as: where per-run working directories are made (absolute after loading, never inside the data dir); empty: `<data_dir>-runs`. */
    work_dir: string().prefault(""),
  }),
  /** The board lab: power and console ports of managed devices (./lab.ts, docs/lab.md). */
  lab: labSection,
});

export type Config = z.output<typeof configSchema>;
export type { LogFormat, LogLevel } from "../util/log.ts";

const parseConfig = (input: unknown): Config => parseWith(configSchema, input, (path) => keyName(path.length ? path.join(".") : "(top level)"));

export const defaultConfig = (): Config => parseConfig({});

export interface ConfigSources {
  /** Explicit --config path; must exist. */
  file?: string;
  /** Directory in which `appliance.config.yaml` is looked up when no file is given. */
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  flags?: { dataDir?: string; listen?: string; databaseUrl?: string };
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
  const databaseUrl = sources.flags?.databaseUrl !== undefined ? (["--database-url", sources.flags.databaseUrl] as const) : env.LABGATE_DATABASE_URL ? (["LABGATE_DATABASE_URL", env.LABGATE_DATABASE_URL] as const) : undefined;
  if (databaseUrl) {
    const [name, url] = databaseUrl;
    checkDatabaseUrl(url, name);
    const section = layered.database ?? {};
    // A section that is not a mapping stays as it is, for the schema to name.
    if (typeof section === "object" && section !== null && !Array.isArray(section)) layered.database = { ...section, url };
  }

  const config = parseConfig(layered);
  if (!config.data_dir) throw new ConfigError("config key data_dir: must not be empty");
  config.data_dir = resolve(cwd, config.data_dir);
  const { tls } = config;
  if (Boolean(tls.cert_file) !== Boolean(tls.key_file)) fail(tls.cert_file ? "tls.key_file" : "tls.cert_file", "give both tls.cert_file and tls.key_file, or neither");
  if (tls.cert_file) {
    tls.cert_file = resolve(cwd, tls.cert_file);
    tls.key_file = resolve(cwd, tls.key_file);
  }
  const signing = config.update_server.signing;
  signing.keys = signing.keys.map((key) => resolve(cwd, key));
  if (signing.required && signing.keys.length === 0) fail("update_server.signing.required", "needs update_server.signing.keys to check signatures with");
  if (config.test_server.nodes_file) config.test_server.nodes = readNodesFile(resolve(cwd, config.test_server.nodes_file), config.test_server.nodes);
  resolveStorage(config, cwd);
  resolveTestrunDirs(config, cwd);
  resolveRunAs(config, cwd);
  return { config, file };
}

/** Makes `storage.local.dir` absolute and checks that an S3 store is named in full (the secret is never shown). */
function resolveStorage(config: Config, cwd: string): void {
  const storage = config.storage;
  if (storage.local.dir) storage.local.dir = resolve(cwd, storage.local.dir);
  if (storage.driver !== "s3") return;
  const s3 = storage.s3;
  if (!/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/.test(s3.bucket)) fail("storage.s3.bucket", s3.bucket ? `expected an S3 bucket name (3-63 lowercase letters, digits, '.', '-'), got ${JSON.stringify(s3.bucket)}` : "needed with storage.driver: s3");
  if (!/^[a-z0-9-]{1,32}$/.test(s3.region)) fail("storage.s3.region", `expected a region such as us-east-1, got ${JSON.stringify(s3.region)}`);
  if (!s3.access_key_id) fail("storage.s3.access_key_id", "needed with storage.driver: s3");
  if (!s3.secret_access_key) fail("storage.s3.secret_access_key", "needed with storage.driver: s3");
  if (!s3.path_style && !s3.endpoint && s3.bucket.includes(".")) fail("storage.s3.path_style", "a bucket name with '.' needs path_style: true");
}

/** Checks `test_server.run_as`'s form and makes `work_dir` absolute, outside the data dir (the tests' user must reach nothing there). */
function resolveRunAs(config: Config, cwd: string): void {
  const ts = config.test_server;
  if (ts.run_as && !RUN_AS_FORM.test(ts.run_as)) fail("test_server.run_as", `expected a user name or user:group, got ${JSON.stringify(ts.run_as)}`);
  if (!ts.work_dir) return;
  ts.work_dir = resolve(cwd, ts.work_dir);
  const rel = relative(config.data_dir, ts.work_dir);
  if (rel === "" || (!rel.startsWith("..") && !isAbsolute(rel))) fail("test_server.work_dir", `${ts.work_dir} is inside the data dir, which test processes must not reach`);
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

/** Reads `test_server.nodes_file` (protoplaster's `--external-devices` format) into `nodes`, with the conflict rules. */
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
  try {
    return readNodes(raw, { ...nodes });
  } catch (error) {
    if (!(error instanceof Problem)) throw error;
    return fail([`test_server.nodes_file[${path}]`, ...error.path].join("."), error.what);
  }
}
