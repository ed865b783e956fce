import { existsSync, readFileSync } from "node:fs";
import { cliActor, cliName } from "../audit/audit.ts";
import { join } from "node:path";
import { X509Certificate } from "node:crypto";
import { httpClient, type HttpAnswer } from "../update/client/http.ts";
import {
  AccountConflict,
  AccountMissing,
  createAccount,
  invalid,
  listAccounts,
  updateAccount,
  type AccountChange,
} from "../accounts/accounts.ts";
import { accountName, accountPassword, type Account, type AccountUpdate } from "../accounts/schema.ts";
import { loadOrCreateKeys } from "../auth/keys.ts";
import { TokenService } from "../auth/tokens.ts";
import { loadConfig, type Config } from "../config/config.ts";
import { Database, IMAGE_FILE, migrate, migrations } from "../db/index.ts";
import { embeddedStore, type Store } from "../db/store.ts";
import { acquireLock, DataDirInUseError } from "../util/lock.ts";
import { SERVER_URL_FILE } from "../server/start.ts";
import { COMMON, parseScopeList, parseWith, UsageError, USER_HELP } from "./args.ts";

/** A failure to report (exit code 1), e.g. a name that is taken. */
export class CommandError extends Error {}

/** What the user commands do with the accounts: in the database, or through the running server. */
interface Accounts {
  list(): Promise<Account[]>;
  add(name: string, password: string, scopes: string[]): Promise<Account>;
  change(name: string, change: AccountUpdate): Promise<Account>;
}

/** A call to the running server's management API (JSON in and out); failures are CommandErrors. */
export type ApiCall = (method: string, path: string, body?: unknown) => Promise<unknown>;

/**
 * Runs `local` on the data dir's database (its store, and the database itself for what is not a
 * query: a snapshot), or `remote` on the server running there. With no
 * server on the data dir it takes the lock and opens the database itself; while a server runs
 * there (it holds the lock) it asks that server, over its API on loopback, with a one-minute
 * admin token signed with the data dir's key (as `token issue` does). Either way the change is
 * on disk when this returns.
 */
export async function onDataDir<T>(
  config: Config,
  local: (store: Store, db: Database) => Promise<T>,
  remote: (call: ApiCall, request: ServerFetch) => Promise<T>,
): Promise<T> {
  const missing = () => new CommandError(`no labgate database in ${config.data_dir} yet: run labgate serve once first`);
  if (!existsSync(config.data_dir)) throw missing();
  let release: (() => void) | undefined;
  try {
    release = acquireLock(config.data_dir);
  } catch (error) {
    if (!(error instanceof DataDirInUseError)) throw error;
    const request = serverFetch(config);
    return remote(serverApi(request), request);
  }
  try {
    if (!existsSync(join(config.data_dir, IMAGE_FILE))) throw missing();
    const db = await Database.open(config.data_dir, { log: (level, message) => level !== "info" && process.stderr.write(`labgate: ${message}\n`) });
    const store = embeddedStore(db);
    try {
      await migrate(db, migrations);
      return await local(store, db);
    } finally {
      await store.close();
      await db.close();
    }
  } finally {
    release();
  }
}

/** Runs `work` on the data dir's accounts (see onDataDir). */
const withAccounts = <T>(config: Config, work: (accounts: Accounts) => Promise<T>): Promise<T> =>
  onDataDir(config, (store) => work(localAccounts(store, config.prefix)), (call) => work(remoteAccounts(call)));

function localAccounts(store: Store, prefix: string): Accounts {
  const scopes = (names: string[]) => parseScopeList(prefix, names.join(","), true);
  const answer = <T>(promise: Promise<T>) =>
    promise.catch((error) => {
      throw error instanceof AccountConflict || error instanceof AccountMissing ? new CommandError(error.message) : error;
    });
  return {
    list: () => listAccounts(store.query, prefix),
    add: (name, password, names) => answer(createAccount(store, prefix, name, password, scopes(names), { now: new Date(), actor: cliActor() })),
    change: (name, change) => {
      const parsed: AccountChange = { password: change.password, disabled: change.disabled, scopes: change.scopes && scopes(change.scopes) };
      return answer(updateAccount(store, prefix, name, parsed, new Date(), cliActor()));
    },
  };
}

/** A request to the running server's management API, as it answered (connection failures are CommandErrors). */
export type ServerFetch = (method: string, path: string, body?: unknown) => Promise<HttpAnswer>;

/** The server running on the data dir (its address from server.url), called with a one-minute admin token of `cli:<login>`. */
export function serverFetch(config: Config): ServerFetch {
  let base: string;
  try {
    base = readFileSync(join(config.data_dir, SERVER_URL_FILE), "utf8").trim();
  } catch {
    throw new CommandError(`a labgate server runs on ${config.data_dir} but has not said where (${SERVER_URL_FILE}); try again when it has started`);
  }
  // Its subject names the command and who runs it: the server's audit log shows `cli:<login>`.
  const token = new TokenService(loadOrCreateKeys(config.data_dir), config.prefix).issueManagement(cliName(), ["admin_rw"], 60);
  // It is on loopback, under any name: trusted is exactly the certificate it is configured with.
  const certFile = base.startsWith("https:") ? config.tls.cert_file : undefined;
  const request = httpClient(certFile ? { pinned: new X509Certificate(readFileSync(certFile)).fingerprint256 } : {});
  return async (method, path, body) => {
    try {
      return await request(base + path, {
        method,
        headers: { authorization: `Bearer token=${token}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (error) {
      throw new CommandError(`cannot reach the server running on ${config.data_dir} at ${base}: ${(error as Error).message}${certFile ? ` (${certFile})` : ""}`);
    }
  };
}

/** The JSON API of the server running on the data dir. */
function serverApi(request: ServerFetch): ApiCall {
  return async (method, path, body) => {
    const res = await request(method, path, body);
    const answer = (await res.json().catch(() => ({}))) as { error?: string };
    if (res.status < 200 || res.status > 299) throw new CommandError(answer.error ?? `the server answered ${res.status}`);
    return answer;
  };
}

function remoteAccounts(call: ApiCall): Accounts {
  const path = (name: string) => `/api/v1/users/${encodeURIComponent(name)}`;
  return {
    list: async () => (await call("GET", "/api/v1/users")) as Account[],
    add: async (name, password, scopes) => (await call("POST", "/api/v1/users", { name, password, scopes })) as Account,
    change: async (name, change) => (await call("PATCH", path(name), change)) as Account,
  };
}

/** Reads a password: the first line of `file`, else typed at the terminal (twice, not echoed), else the first line of stdin. */
async function readPassword(file: string | undefined, name: string): Promise<string> {
  let password: string;
  if (file !== undefined) {
    try {
      password = readFileSync(file, "utf8").split(/\r?\n/)[0];
    } catch (error) {
      throw new UsageError(`--password-file: cannot read ${file}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`);
    }
  } else if (process.stdin.isTTY) {
    password = await prompt(`Password for ${name}: `);
    if ((await prompt("Again: ")) !== password) throw new UsageError("the passwords differ");
  } else {
    password = (await readStdin()).split(/\r?\n/)[0];
  }
  const problem = invalid(accountPassword, password);
  if (problem) throw new UsageError(problem);
  return password;
}

function readStdin(): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = "";
    process.stdin.setEncoding("utf8");
    process.stdin.on("data", (chunk) => (text += chunk)).once("end", () => resolve(text)).once("error", reject);
  });
}

/** One line typed at the terminal without echo. */
function prompt(question: string): Promise<string> {
  const stdin = process.stdin;
  process.stderr.write(question);
  stdin.setRawMode(true);
  stdin.setEncoding("utf8");
  stdin.resume();
  return new Promise((resolve, reject) => {
    let line = "";
    const done = (error?: Error) => {
      stdin.off("data", onData);
      stdin.setRawMode(false);
      stdin.pause();
      process.stderr.write("\n");
      if (error) reject(error);
      else resolve(line);
    };
    const onData = (chunk: string) => {
      for (const ch of chunk) {
        if (ch === "\r" || ch === "\n") return done();
        if (ch === "\u0003" || ch === "\u0004") return done(new UsageError("cancelled"));
        if (ch === "\u007f" || ch === "\b") line = line.slice(0, -1);
        else line += ch;
      }
    };
    stdin.on("data", onData);
  });
}

const describe = (a: Account) =>
  `${a.name}\t${a.disabled ? "disabled" : "enabled"}\t${a.scopes.join(",") || "-"}\tcreated ${a.created}\tlast login ${a.last_login ?? "never"}`;

/** `labgate user add|passwd|disable|enable|list ...`: returns the exit code. */
export async function userCommand(args: string[]): Promise<number> {
  const [sub, ...rest] = args;
  const { values: flags, positionals } = parseWith(rest, { ...COMMON, scopes: { type: "string" }, "password-file": { type: "string" } });
  const takes = (options: string[], names: number) => {
    const extra = Object.keys(flags).find((k) => !["config", "data-dir", ...options].includes(k));
    if (extra) throw new UsageError(`labgate user ${sub}: unknown option --${extra}`);
    if (positionals.length !== names) throw new UsageError(`labgate user ${sub}: expected ${names === 1 ? "one account name" : "no arguments"}`);
    const name = positionals[0];
    if (names === 1) {
      const problem = invalid(accountName, name);
      if (problem) throw new UsageError(problem);
    }
    return name;
  };
  const { config } = loadConfig({ file: flags.config, flags: { dataDir: flags["data-dir"] } });
  switch (sub) {
    case "add": {
      const name = takes(["scopes", "password-file"], 1);
      if (flags.scopes === undefined) throw new UsageError("--scopes: required (comma-separated; e.g. svc_admin_ro,svc_tests_rw)");
      const scopes = parseScopeList(config.prefix, flags.scopes);
      const password = await readPassword(flags["password-file"], name);
      const made = await withAccounts(config, (accounts) => accounts.add(name, password, scopes.map((s) => `${config.prefix}_${s}`)));
      process.stdout.write(`${describe(made)}\n`);
      return 0;
    }
    case "passwd": {
      const name = takes(["password-file"], 1);
      const password = await readPassword(flags["password-file"], name);
      await withAccounts(config, (accounts) => accounts.change(name, { password }));
      process.stdout.write(`${name}: password changed; its console sessions have ended\n`);
      return 0;
    }
    case "disable":
    case "enable": {
      const name = takes([], 1);
      const changed = await withAccounts(config, (accounts) => accounts.change(name, { disabled: sub === "disable" }));
      process.stdout.write(`${describe(changed)}\n`);
      return 0;
    }
    case "list": {
      takes([], 0);
      const all = await withAccounts(config, (accounts) => accounts.list());
      for (const account of all) process.stdout.write(`${describe(account)}\n`);
      return 0;
    }
    default:
      throw new UsageError(`unknown user command ${JSON.stringify(sub ?? "")}; expected:\n${USER_HELP}`);
  }
}
