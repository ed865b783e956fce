import { join } from "node:path";
import { recordAudit, systemActor, type Actor } from "../audit/audit.ts";
import * as z from "zod";
import type { Selectable } from "kysely";
import type { AccountsTable } from "../db/schema.ts";
import type { Queries, Store, Tx } from "../db/store.ts";
import { grants, SCOPES, scopeName, type Scope } from "../auth/scopes.ts";
import type { ManagementIdentity } from "../auth/tokens.ts";
import { writeFileDurable } from "../util/files.ts";
import { LabgateError } from "../util/errors.ts";
import { revokeUserTokens } from "../auth/revocations.ts";
import type { Account } from "./schema.ts";
import { DUMMY_HASH, hashPassword, outdatedHash, randomPassword, verifyPassword } from "./passwords.ts";
import { isoTime } from "../util/time.ts";

type AccountRow = Selectable<AccountsTable>;

export const ADMIN_ACCOUNT = "admin";
export const ADMIN_PASSWORD_FILE = "admin.password";

/** Checks a name or password given outside a zod body (the CLI); returns the message, or undefined when fine. */
export function invalid(schema: z.ZodType, value: unknown): string | undefined {
  const result = schema.safeParse(value);
  return result.success ? undefined : result.error.issues[0].message;
}

/** Scopes as stored: space-separated bare names in the order of SCOPES. */
const scopeText = (scopes: readonly Scope[]) => SCOPES.filter((s) => scopes.includes(s)).join(" ");

const storedScopes = (row: Pick<AccountRow, "scopes">): Scope[] => row.scopes.split(" ").filter((s): s is Scope => (SCOPES as readonly string[]).includes(s));

function view(prefix: string, row: AccountRow): Account {
  return {
    name: row.name,
    scopes: storedScopes(row).map((s) => scopeName(prefix, s)),
    disabled: row.disabled === 1,
    created: row.created,
    last_login: row.last_login,
  };
}

/** The account of a name (ignoring case: the column's collation, on both engines). */
const getRow = (q: Queries, name: string) => q.selectFrom("accounts").selectAll().where("name", "=", name).executeTakeFirst();

export async function countAccounts(q: Queries): Promise<number> {
  return (await q.selectFrom("accounts").select((eb) => eb.fn.countAll<number>().as("n")).executeTakeFirstOrThrow()).n;
}

export async function listAccounts(q: Queries, prefix: string): Promise<Account[]> {
  const rows = await q.selectFrom("accounts").selectAll().orderBy("name").execute();
  return rows.map((row) => view(prefix, row));
}

export async function getAccount(q: Queries, prefix: string, name: string): Promise<Account | undefined> {
  const row = await getRow(q, name);
  return row && view(prefix, row);
}

/** Why a change is refused: the name is taken, the account does not exist, or it would lock every admin out. */
export class AccountConflict extends LabgateError {
  constructor(message: string) {
    super("conflict", message);
  }
}
export class AccountMissing extends LabgateError {
  constructor(message: string) {
    super("not_found", message);
  }
}

/**
 * Creates an account (the password is hashed here).
 * Throws AccountConflict when the name is taken (ignoring case).
 */
export async function createAccount(
  store: Store,
  prefix: string,
  name: string,
  password: string,
  scopes: readonly Scope[],
  options: { now: Date; actor: Actor },
): Promise<Account> {
  const hash = await hashPassword(password);
  await store.transact(async (tx) => {
    if (await getRow(tx, name)) throw new AccountConflict(`account ${name} already exists`);
    await tx.insertInto("accounts").values({ name, password_hash: hash, scopes: scopeText(scopes), disabled: 0, created: isoTime(options.now) }).execute();
    await recordAudit(tx, options.actor, "user.add", `user:${name}`, { scopes: scopeText(scopes) });
  });
  return (await getAccount(store.query, prefix, name))!;
}

export interface AccountChange {
  password?: string;
  scopes?: readonly Scope[];
  disabled?: boolean;
}

/** Enabled accounts with admin_rw other than `except`. */
async function otherAdmins(q: Queries, except: string): Promise<number> {
  const rows = await q.selectFrom("accounts").select("scopes").where("disabled", "=", 0).where("name", "<>", except).execute();
  return rows.filter((row) => storedScopes(row).includes("admin_rw")).length;
}

/**
 * Changes an account. Disabling it or changing its password ends its sessions (counts its
 * session epoch up); disabling it also revokes every token issued for its name until now. Refused (AccountConflict) when it would leave no enabled account with admin_rw,
 * or when `actor` would disable themselves.
 */
export async function updateAccount(store: Store, prefix: string, name: string, change: AccountChange, now: Date, actor: Actor): Promise<Account> {
  const hash = change.password === undefined ? undefined : await hashPassword(change.password);
  const stored = await store.transact(async (tx) => {
    const row = await getRow(tx, name);
    if (!row) throw new AccountMissing(`account ${name} does not exist`);
    const disabled = change.disabled ?? row.disabled === 1;
    const scopes = change.scopes ?? storedScopes(row);
    if (change.disabled === true && actor.kind !== "system" && actor.name.toLowerCase() === row.name.toLowerCase()) throw new AccountConflict("you cannot disable your own account");
    const wasAdmin = row.disabled === 0 && storedScopes(row).includes("admin_rw");
    if (wasAdmin && (disabled || !scopes.includes("admin_rw")) && (await otherAdmins(tx, row.name)) === 0) {
      throw new AccountConflict("this is the last enabled account with admin_rw; give another account admin_rw first");
    }
    const endSessions = (change.disabled === true && row.disabled === 0) || hash !== undefined;
    await tx
      .updateTable("accounts")
      .set({ password_hash: hash ?? row.password_hash, scopes: scopeText(scopes), disabled: disabled ? 1 : 0, session_epoch: row.session_epoch + (endSessions ? 1 : 0) })
      .where("name", "=", row.name)
      .execute();
    // Disabling also ends the tokens issued for the name (labgate token issue), not only sessions.
    if (change.disabled === true && row.disabled === 0) await revokeUserTokens(tx, row.name, now);
    // One entry per kind of change; never the password itself.
    const target = `user:${row.name}`;
    if (hash !== undefined) await recordAudit(tx, actor, "user.passwd", target);
    if (change.scopes !== undefined) await recordAudit(tx, actor, "user.scopes", target, { scopes: scopeText(scopes) });
    if (change.disabled !== undefined && change.disabled !== (row.disabled === 1)) await recordAudit(tx, actor, disabled ? "user.disable" : "user.enable", target);
    return row.name;
  });
  return (await getAccount(store.query, prefix, stored))!;
}

/**
 * The account `name` when `password` is its password and it is enabled, else undefined (one
 * answer for every failure; an unknown name costs the same scrypt as a known one). Records the login.
 */
export async function checkLogin(store: Store, name: string, password: string, now: Date, actor: Actor): Promise<{ name: string; scopes: Scope[]; sessionEpoch: number } | undefined> {
  const row = await getRow(store.query, name);
  const matches = await verifyPassword(password, row?.password_hash ?? DUMMY_HASH);
  // Read again: the account may have changed while scrypt ran.
  const current = await getRow(store.query, name);
  if (!row || !matches || !current || current.disabled === 1 || current.password_hash !== row.password_hash) return undefined;
  // A hash made with other parameters (an older first admin's) is made again now.
  const rehashed = outdatedHash(row.password_hash) ? await hashPassword(password) : undefined;
  await store.transact(async (tx) => {
    await tx.updateTable("accounts").set({ last_login: isoTime(now) }).where("name", "=", current.name).execute();
    if (rehashed) await tx.updateTable("accounts").set({ password_hash: rehashed }).where("name", "=", current.name).where("password_hash", "=", row.password_hash).execute();
    await recordAudit(tx, { ...actor, kind: "account", name: current.name }, "login.success", `user:${current.name}`);
  });
  return { name: current.name, scopes: storedScopes(current), sessionEpoch: current.session_epoch };
}

export const MSG_SESSION_ENDED = "session has ended";
export const MSG_ACCOUNT_DISABLED = "the account is disabled";

/** Scopes both sets grant (each with what it implies), as few as say it: `token`'s own when the account grants them all. */
function narrowed(token: ReadonlySet<Scope>, account: ReadonlySet<Scope>): Set<Scope> {
  if ([...token].every((s) => grants(account, s))) return new Set(token);
  return new Set(SCOPES.filter((s) => grants(token, s) && grants(account, s)));
}

/**
 * The account gate (the accounts domain's `accountGate`, asked by the auth check and AccessWatch): a management token as its account stands now. A console
 * session acts with the account's current scopes while the account exists, is enabled and has
 * not ended its sessions since (same session epoch); another token of an account's name acts with
 * what both its own scopes and the account's grant, and not at all while the account is disabled.
 * A token of a name that is no account (a machine's) keeps its scopes. Returns the refusal's reason otherwise.
 */
export async function accountStanding(q: Queries, identity: ManagementIdentity): Promise<ManagementIdentity | string> {
  const row = await q.selectFrom("accounts").select(["scopes", "disabled", "session_epoch"]).where("name", "=", identity.user).executeTakeFirst();
  if (identity.session !== undefined && (row === undefined || row.disabled === 1 || identity.session !== row.session_epoch)) return MSG_SESSION_ENDED;
  if (row === undefined) return identity;
  if (row.disabled === 1) return MSG_ACCOUNT_DISABLED;
  const scopes = new Set(storedScopes(row));
  return { ...identity, scopes: identity.session !== undefined ? scopes : narrowed(identity.scopes, scopes), token: identity };
}

/** An enabled account's stored scopes (space-separated), or undefined when there is none of that name. */
export function enabledScopesOf(q: Queries, name: string): Promise<string | undefined> {
  return q
    .selectFrom("accounts")
    .select("scopes")
    .where("name", "=", name)
    .where("disabled", "=", 0)
    .executeTakeFirst()
    .then((row) => row?.scopes);
}

/**
 * Deletes an account: its sessions end, every token issued for its name until now is revoked (a
 * token must not get back the scopes the account no longer caps) and its per-user permissions
 * go (`dropPermissions`, in the same transaction: that table is the update server's), so that a new
 * account of that name starts with none. Refused like disabling (AccountConflict).
 */
export async function deleteAccount(store: Store, name: string, now: Date, actor: Actor, dropPermissions: (tx: Tx, user: string) => Promise<void>): Promise<void> {
  await store.transact(async (tx) => {
    const row = await getRow(tx, name);
    if (!row) throw new AccountMissing(`account ${name} does not exist`);
    if (actor.name.toLowerCase() === row.name.toLowerCase()) throw new AccountConflict("you cannot delete your own account");
    if (row.disabled === 0 && storedScopes(row).includes("admin_rw") && (await otherAdmins(tx, row.name)) === 0) {
      throw new AccountConflict("this is the last enabled account with admin_rw; give another account admin_rw first");
    }
    await tx.deleteFrom("accounts").where("name", "=", row.name).execute();
    await dropPermissions(tx, row.name);
    await revokeUserTokens(tx, row.name, now);
    await recordAudit(tx, actor, "user.delete", `user:${row.name}`);
  });
}

/** Whether any console account exists: none before the first start has completed. */
export async function accountsExist(store: Store): Promise<boolean> {
  return (await countAccounts(store.query)) > 0;
}

/**
 * With no account at all (first start, or a data dir from before accounts), creates `admin` with
 * every scope and a random password, written to DATA_DIR/admin.password first so that it
 * is never lost. Returns that file's path when it did.
 */
export async function createFirstAdmin(store: Store, dataDir: string, prefix: string, now: Date): Promise<string | undefined> {
  if (await accountsExist(store)) return undefined;
  const password = randomPassword();
  const file = join(dataDir, ADMIN_PASSWORD_FILE);
  writeFileDurable(file, password + "\n", 0o600);
  await createAccount(store, prefix, ADMIN_ACCOUNT, password, SCOPES, { now, actor: systemActor("server", now) });
  return file;
}
