import { loadConfig } from "../config/config.ts";
import { SCOPES } from "../auth/scopes.ts";
import { isoTime, parseDuration } from "../util/time.ts";
import { describeBuild, VERSION } from "../version.ts";
import { BACKUP_HELP, CLUSTER_HELP, COMMON, DATABASE, DB_HELP, parse, parseScopeList, UsageError, USER_HELP } from "./args.ts";
import { exitCode } from "./exit.ts";

// Each command imports what it needs when it runs: help, version and usage errors answer
// without loading the server, and the agent without the server's modules.

/** Comma-separated items, wrapped at `width` columns, each line indented. */
function wrapList(items: readonly string[], indent: string, width: number): string {
  const lines = [indent];
  for (const [i, item] of items.entries()) {
    const text = item + (i < items.length - 1 ? "," : "");
    if (lines[lines.length - 1].length + text.length + 1 > width) lines.push(indent);
    lines[lines.length - 1] += (lines[lines.length - 1] === indent ? "" : " ") + text;
  }
  return lines.join("\n");
}

export const HELP = `labgate ${VERSION}: device update management and test runs for an isolated lab network

Usage:
  labgate serve [--config FILE] [--data-dir DIR] [--listen HOST:PORT] [--database-url URL]
  labgate token issue --user NAME --scopes S1,S2 [--ttl 30d] [--config FILE] [--data-dir DIR]
  labgate token revoke --id ID | --user NAME [--config FILE] [--data-dir DIR] [--database-url URL]
${USER_HELP}
${BACKUP_HELP}
${DB_HELP}
${CLUSTER_HELP}
  labgate agent [--config FILE] [--server URL] [--data-dir DIR] [--fingerprint]
  labgate version
  labgate help

serve        runs both APIs on one listener (default 0.0.0.0:5000, data dir ./data,
             config ./appliance.config.yaml when it exists). On the first start it writes
             an admin token to DATA_DIR/admin.token and creates the console account admin,
             its password in DATA_DIR/admin.password. --database-url postgres://...
             keeps the database in PostgreSQL instead of the data dir.
token issue  prints a management token signed with the data dir's key. Scopes (the
             config's prefix may be left out):
${wrapList(SCOPES.map((s) => `svc_${s}`), "               ", 86)}
             --ttl accepts 45s, 15m, 12h, 30d, 2w (default 30d). Its id goes to stderr;
             the audit log records it (running server or not).
token revoke ends one token (--id, as issue or GET /api/whoami shows it) or every token
             of a user issued until now (--user), on the next request. Works whether or not
             a server runs on the data dir.
user         console accounts (names: 1-64 of A-Z a-z 0-9 _ . -; scopes as for tokens).
             The password comes from --password-file (its first line), else a prompt, else
             stdin's first line; at least 8 characters. disable (or a new password) ends the
             account's console sessions. Works whether or not a server runs on the data dir.
backup       writes one tar file (mode 0600: it holds the keys) with a consistent image of
             the database, the package objects, test configs, reports, artifacts, keys and
             secrets, and a SHA-256 of each; a running server on the data dir makes it (ask
             it with --config when it serves HTTPS), else labgate reads the data dir itself.
             The file appears only once complete and checked. --out - writes to stdout.
restore      makes a new data dir from a backup (--in - reads stdin): refuses a target that
             is not empty and a backup that is damaged or cut short; nothing appears at
             the target unless all of it checks out.
db copy      copies a stopped embedded database into an empty PostgreSQL database (one
             transaction: all of it or nothing), one line per table with its rows; the
             data dir's files are left as they were.
cluster join before a new node's first start, copies the cluster's signing key and link
             secret from the running node at --from (https, or http on loopback only)
             into this data dir, with an admin_rw token from --token-file; refuses a
             data dir holding other keys. The node then shares the others' database.url.
agent        runs the device side on a lab device (config: YAML, see README): keeps its
             key in the data dir (default ./agent-data), registers and waits for approval,
             keeps the management socket open, runs its configured actions, serves file
             downloads from file_base_dir, installs updates with install_command.
             It prints its key's fingerprint at start; --fingerprint prints only that
             (compare it with the one Registrations shows before approving).

Environment: LABGATE_CONFIG, LABGATE_DATA_DIR, LABGATE_LISTEN, LABGATE_DATABASE_URL (flags win over them).
`;

/** Where a browser opens the console: `public_url`, else the listener (a wildcard address becomes this machine's loopback). */
export function consoleUrl(publicUrl: string, listening: string): string {
  if (publicUrl) return `${publicUrl}/`;
  const url = new URL(listening);
  if (url.hostname === "0.0.0.0" || url.hostname === "[::]") url.hostname = "127.0.0.1";
  return url.href;
}

async function serve(args: string[]): Promise<number> {
  // sql.js's wasm compiles on a V8 helper thread: begun before the server's modules load (the
  // bulk of a start), it is done when the database opens, which otherwise waited for it. A failure
  // is the database's to report (Database.open awaits the same promise).
  (await import("../db/wasm.ts")).loadSqlJs().catch(() => {});
  const flags = parse(args, { ...DATABASE, listen: { type: "string" } });
  const { config } = loadConfig({ file: flags.config, flags: { dataDir: flags["data-dir"], listen: flags.listen, databaseUrl: flags["database-url"] } });
  // Signals are caught from the start: one that arrives while starting stops the server once it is up.
  const signalled = new Promise<string>((resolve) => {
    process.once("SIGINT", () => resolve("SIGINT"));
    process.once("SIGTERM", () => resolve("SIGTERM"));
  });
  const { startServer } = await import("../server/start.ts");
  const { startMemoryRelief } = await import("../util/memory-relief.ts");
  const server = await startServer(config);
  // Heap pages freed by a burst go back to the system once it is over (not only after fan-outs).
  const unwatch = startMemoryRelief(config.memory_relief, server.ctx.log);
  // An exception nothing caught leaves the process in an unknown state: it ends (systemd restarts
  // it), with one log line naming the requests in flight, the one that threw among them.
  process.on("uncaughtException", (error) => {
    server.ctx.log.error(`uncaught exception, exiting (${server.domains.shared.inFlight.describe()}): ${error.stack ?? error}`);
    process.exit(1);
  });
  process.on("SIGHUP", () => {
    if (!config.tls.cert_file) return server.ctx.log.info("SIGHUP: no TLS configured, nothing to reload");
    try {
      server.reloadTls();
      server.ctx.log.info(`SIGHUP: TLS certificate reloaded from ${config.tls.cert_file}`);
    } catch (error) {
      server.ctx.log.error(`SIGHUP: ${(error as Error).message}; keeping the previous certificate`);
    }
  });
  if (server.adminTokenFile) process.stderr.write(`labgate: first start: an admin token (all scopes) is in ${server.adminTokenFile}\n`);
  if (server.adminPasswordFile) {
    process.stderr.write(`labgate: console account "admin" (all scopes) created; its password is in ${server.adminPasswordFile}\n`);
  }
  process.stdout.write(`labgate: web console at ${consoleUrl(config.public_url, server.url)}\n`);
  process.stdout.write(`labgate listening on ${server.url}\n`);
  const signal = await signalled;
  server.ctx.log.info(`${signal}: shutting down`);
  unwatch();
  try {
    await server.close();
  } catch (error) {
    server.ctx.log.error(`shutdown: ${(error as Error).message}`);
  }
  return 0;
}

async function tokenIssue(args: string[]): Promise<number> {
  const flags = parse(args, { ...COMMON, user: { type: "string" }, scopes: { type: "string" }, ttl: { type: "string" } });
  if (!flags.user) throw new UsageError("--user: required (the token's subject)");
  if (flags.scopes === undefined) throw new UsageError("--scopes: required (comma-separated)");
  const ttl = parseDuration(flags.ttl ?? "30d");
  if (ttl === undefined) throw new UsageError(`--ttl: expected a duration such as 30d, 12h or 3600, got ${JSON.stringify(flags.ttl)}`);
  const { config } = loadConfig({ file: flags.config, flags: { dataDir: flags["data-dir"] } });
  const { loadOrCreateKeys } = await import("../auth/keys.ts");
  const { TokenService } = await import("../auth/tokens.ts");
  const { decodeJwt } = await import("../auth/jwt.ts");
  const { appendToSpool } = await import("../audit/spool.ts");
  const { cliActor } = await import("../audit/audit.ts");
  const tokens = new TokenService(loadOrCreateKeys(config.data_dir), config.prefix);
  const scopes = parseScopeList(config.prefix, flags.scopes);
  const token = tokens.issueManagement(flags.user, scopes, ttl);
  const decoded = decodeJwt(token);
  if (typeof decoded === "string") throw new Error(`the token just issued does not decode: ${decoded}`);
  const id = String(decoded.payload.jti);
  // In the audit log's spool (on disk) before anyone sees the token: a server running on the
  // data dir takes it at once, else the next start does (src/audit/spool.ts).
  appendToSpool(config.data_dir, cliActor(), "token.issue", `token:${id}`, { user: flags.user, scopes: scopes.join(" "), expires: isoTime(Number(decoded.payload.exp) * 1000) });
  process.stdout.write(token + "\n");
  process.stderr.write(`labgate: token id ${id} (labgate token revoke --id)\n`);
  return 0;
}

async function tokenRevoke(args: string[]): Promise<number> {
  const flags = parse(args, { ...DATABASE, id: { type: "string" }, user: { type: "string" } });
  if ((flags.id === undefined) === (flags.user === undefined)) throw new UsageError("give exactly one of --id ID and --user NAME");
  const { config } = loadConfig({ file: flags.config, flags: { dataDir: flags["data-dir"], databaseUrl: flags["database-url"] } });
  const { id, user } = flags;
  const { onDataDir } = await import("./users.ts");
  const { revokeTokens } = await import("../auth/revocations.ts");
  const { cliActor } = await import("../audit/audit.ts");
  await onDataDir(
    config,
    (store) => revokeTokens(store, { id, user }, cliActor()),
    async (call) => void (await call("POST", "/api/v1/tokens/revoke", id !== undefined ? { id } : { user })),
  );
  process.stdout.write(id !== undefined ? `token ${id} revoked\n` : `every token of ${user} issued until now revoked\n`);
  return 0;
}

/** Runs one CLI invocation and returns its exit code. */
export async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  return exitCode(async () => {
    switch (command) {
      case "serve":
        return await serve(rest);
      case "token":
        if (rest[0] === "revoke") return await tokenRevoke(rest.slice(1));
        if (rest[0] !== "issue") throw new UsageError(`unknown token command ${JSON.stringify(rest[0] ?? "")}; expected: labgate token issue | revoke`);
        return await tokenIssue(rest.slice(1));
      case "user":
        return await (await import("./users.ts")).userCommand(rest);
      case "backup":
        return await (await import("./backup.ts")).backupCommand(rest);
      case "restore":
        return await (await import("./backup.ts")).restoreCommand(rest);
      case "db":
        return await (await import("./db.ts")).dbCommand(rest);
      case "cluster":
        return await (await import("./cluster.ts")).clusterCommand(rest);
      case "agent":
        return await (await import("../agent/command.ts")).agentCommand(rest);
      case "version":
      case "--version":
        process.stdout.write(`${describeBuild()}\n`);
        return 0;
      case "help":
      case "--help":
      case "-h":
        process.stdout.write(HELP);
        return 0;
      case undefined:
        process.stderr.write(HELP);
        return 2;
      default:
        throw new UsageError(`unknown command ${JSON.stringify(command)}; run labgate help`);
    }
  });
}
