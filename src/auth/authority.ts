/*
 * A token acts with its account's current standing. The database's access generation
 * (migration 014) counts up on every change to who may do what: an account's scopes, password,
 * enabled state or existence, a revocation, a permission row, or what permission rows reach (a
 * device's name and tags, group membership). `currentIdentity` resolves a verified management
 * token against it (the account, see AccountGate, then revocations), once per generation.
 *
 * Long-lived connections (event streams, shells) register with `AccessWatch`: once a second, and
 * at once after a change made through this server (`sweep`), each is ended when its token has
 * expired, has been revoked, its session has ended, its account's scopes have changed, or its
 * own `check` (a shell: the `shell` permission on its device) fails.
 */
import type { Queries, Store } from "../db/store.ts";
import type { Logger } from "../util/log.ts";
import { dateOf, epochSeconds, every, type Clock } from "../util/time.ts";
import { isRevoked, MSG_EXPIRED, MSG_REVOKED } from "./revocations.ts";
import type { ManagementIdentity } from "./tokens.ts";

export const MSG_SCOPES_CHANGED = "the account's scopes have changed";

/**
 * A management token as its account stands now (the accounts domain makes it): the identity with
 * the account's current scopes, or why it is refused (the session ended, the account is disabled).
 */
export type AccountGate = (identity: ManagementIdentity) => Promise<ManagementIdentity | string>;

/** The access generation: it differs whenever an answer about access may have changed. */
export async function accessGeneration(q: Queries): Promise<number> {
  return (await q.selectFrom("access_generation").select("n").executeTakeFirst())?.n ?? 0;
}

const resolved = new WeakMap<ManagementIdentity, { generation: number; current: ManagementIdentity | string }>();

/**
 * `identity` (a verified, unexpired management token) as it stands now: with its account's
 * current scopes, or the reason it no longer counts (revoked, session ended, account disabled).
 * One query while nothing changed: the answer is kept until the access generation moves.
 */
export async function currentIdentity(q: Queries, gate: AccountGate | undefined, given: ManagementIdentity): Promise<ManagementIdentity | string> {
  const identity = given.token ?? given;
  const generation = await accessGeneration(q);
  const known = resolved.get(identity);
  if (known?.generation === generation) return known.current;
  const standing = gate ? await gate(identity) : identity;
  const current = typeof standing === "string" || !(await isRevoked(q, identity)) ? standing : MSG_REVOKED;
  resolved.set(identity, { generation, current });
  return current;
}

/** The access generation `given` was last resolved at (currentIdentity), or -1 when never. */
const resolvedAt = (given: ManagementIdentity): number => resolved.get(given.token ?? given)?.generation ?? -1;

const sameScopes = (a: ManagementIdentity, b: ManagementIdentity) => a.scopes.size === b.scopes.size && [...a.scopes].every((s) => b.scopes.has(s));

export interface WatchOptions {
  /** Ends the connection, with the reason (a close reason, an SSE comment). */
  end: (reason: string) => void;
  /** A further condition of the connection on the current identity: a reason to end it, or undefined. */
  check?: (current: ManagementIdentity) => string | undefined | Promise<string | undefined>;
}

interface Watch extends WatchOptions {
  identity: ManagementIdentity;
  generation: number;
}

/** Long-lived connections by token, ended when their token or account no longer allows them (see the file comment). */
export class AccessWatch {
  private readonly watches = new Set<Watch>();
  private stopSweeps: (() => void) | undefined;
  private readonly store: Store;
  private readonly gate: AccountGate | undefined;
  private readonly clock: Clock;
  private readonly log: Logger;

  constructor(store: Store, gate: AccountGate | undefined, clock: Clock, log: Logger) {
    this.store = store;
    this.gate = gate;
    this.clock = clock;
    this.log = log;
  }

  /** `identity` as it stands now (currentIdentity with this server's account gate). */
  current(identity: ManagementIdentity): Promise<ManagementIdentity | string> {
    return currentIdentity(this.store.query, this.gate, identity);
  }

  /**
   * Watches a connection opened by `identity` (as currentIdentity gave it); returns the
   * unregistration. Its generation is the one its identity was checked at, so that a change
   * made since is seen by the next sweep.
   */
  watch(identity: ManagementIdentity, options: WatchOptions): () => void {
    const entry: Watch = { ...options, identity, generation: resolvedAt(identity) };
    this.watches.add(entry);
    this.stopSweeps ??= every(this.clock, 1000, () => void this.sweep().catch((error: Error) => this.log.warn(`access watch: ${error.message}`)));
    return () => this.forget(entry);
  }

  /** Ends every watched connection that its token, its account or its check no longer allows. */
  async sweep(): Promise<void> {
    if (this.watches.size === 0) return;
    const now = epochSeconds(dateOf(this.clock));
    const generation = await accessGeneration(this.store.query);
    for (const entry of [...this.watches]) {
      const reason = entry.identity.expiresAt <= now ? MSG_EXPIRED : entry.generation === generation ? undefined : await this.recheck(entry);
      entry.generation = generation;
      // Another sweep (or the connection's own end) may have let it go meanwhile: it ends once.
      if (reason === undefined || !this.watches.has(entry)) continue;
      this.forget(entry);
      entry.end(reason);
    }
  }

  private async recheck(entry: Watch): Promise<string | undefined> {
    const current = await this.current(entry.identity);
    if (typeof current === "string") return current;
    if (!sameScopes(current, entry.identity)) return MSG_SCOPES_CHANGED;
    return entry.check?.(current);
  }
  private forget(entry: Watch): void {
    this.watches.delete(entry);
    if (this.watches.size === 0 && this.stopSweeps) {
      this.stopSweeps();
      this.stopSweeps = undefined;
    }
  }
}
