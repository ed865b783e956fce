/*
 * Refused requests (403) in the audit log, at a cost nobody can make grow: per window of
 * `audit.refusal_window` seconds, one `auth.refused` row per client address, actor and route
 * (method and route pattern, never the raw path) with a count. A key's first refusal in a window
 * is written at once, before the answer goes; the same key again only counts in memory, and the
 * row's count is brought up to date when the window ends. At most `audit.refusal_keys` keys are
 * held per window; refusals beyond them are counted in one row of their own. Every text that
 * comes from the request is cut to a fixed length. Refusal rows have a budget of their own in
 * retention (`audit.max_refusal_rows`, AuditRetention), so they never push out the rows of changes.
 */
import type { Store } from "../db/store.ts";
import { every, isoTime, type Clock } from "../util/time.ts";
import type { Logger } from "../util/log.ts";
import { actorFor, recordAudit, systemActor, type Actor, type Caller } from "./audit.ts";

/** How long a text from the request may be in a refusal's row (its path, message, user agent). */
export const MAX_REQUEST_TEXT = 256;

export interface RefusalLimits {
  /** Seconds of a window: one row per key and window. */
  refusal_window: number;
  /** Keys held per window; the refusals of further keys share one row. */
  refusal_keys: number;
}

/** One key's refusals in the current window. */
interface Tally {
  /** The row written for its first refusal (undefined until that write is done). */
  id: number | undefined;
  /** That first write, awaited before the row's count is updated. */
  written: Promise<void>;
  actor: Actor;
  target: string;
  detail: { path: string; error: string; user_agent: string };
  count: number;
  last: Date;
}

/** The refusals of keys beyond `refusal_keys` in the current window. */
interface Overflow {
  count: number;
  first: Date;
  last: Date;
}

/** A text from the request, cut to `max` characters. */
const bounded = (text: string | undefined, max = MAX_REQUEST_TEXT): string => (text ?? "").slice(0, max);

/** A refused request as the log needs it: who, on which route (method and pattern, `*` for none), its path and user agent. */
export interface RefusedRequest extends Caller {
  method: string;
  route: string | undefined;
  path: string;
  userAgent: string | undefined;
}

/** The route a request was refused on, as its row names it: `DELETE /api/v1/packages/:id`. */
export const refusedRoute = (request: Pick<RefusedRequest, "method" | "route">): string => `${bounded(request.method, 16)} ${request.route ?? "*"}`.slice(0, 512);

export class RefusalLog {
  private tallies = new Map<string, Tally>();
  private overflow: Overflow | undefined;
  private stopWindows: (() => void) | undefined;
  private flushing: Promise<void> = Promise.resolve();
  private readonly store: Store;
  private readonly clock: Clock;
  private readonly log: Logger;
  private readonly limits: RefusalLimits;

  constructor(store: Store, clock: Clock, log: Logger, limits: RefusalLimits) {
    this.store = store;
    this.clock = clock;
    this.log = log;
    this.limits = limits;
  }

  start(): void {
    this.stopWindows = every(this.clock, this.limits.refusal_window * 1000, () => void this.endWindow());
  }

  /** Stops the windows and writes the counts of the last one. */
  async stop(): Promise<void> {
    this.stopWindows?.();
    await this.endWindow();
  }

  /** Records a refused request; a failure to record is logged, never thrown. */
  async record(request: RefusedRequest, message: string): Promise<void> {
    const actor = actorFor(request, this.clock);
    const target = refusedRoute(request);
    const key = JSON.stringify([actor.client, actor.kind, actor.name, actor.tokenId, target]);
    const known = this.tallies.get(key);
    if (known) {
      known.count += 1;
      known.last = actor.at;
      return;
    }
    if (this.tallies.size >= this.limits.refusal_keys) {
      if (this.overflow) (this.overflow.count += 1), (this.overflow.last = actor.at);
      else this.overflow = { count: 1, first: actor.at, last: actor.at };
      return;
    }
    const detail = { path: bounded(request.path), error: bounded(message), user_agent: bounded(request.userAgent) };
    const tally: Tally = { id: undefined, written: Promise.resolve(), actor, target, detail, count: 1, last: actor.at };
    this.tallies.set(key, tally);
    tally.written = recordAudit(this.store.query, actor, "auth.refused", target, { count: 1, ...detail }, "refused")
      .then((id) => void (tally.id = id))
      .catch((error: Error) => this.log.warn(`audit: refusal not recorded: ${error.message}`));
    await tally.written;
  }

  /** Ends the current window: the counts of keys refused more than once, and the overflow's row. */
  endWindow(): Promise<void> {
    const tallies = [...this.tallies.values()].filter((t) => t.count > 1);
    const overflow = this.overflow;
    this.tallies = new Map();
    this.overflow = undefined;
    this.flushing = this.flushing.then(() => this.write(tallies, overflow));
    return this.flushing;
  }

  private async write(tallies: Tally[], overflow: Overflow | undefined): Promise<void> {
    if (tallies.length === 0 && !overflow) return;
    await Promise.all(tallies.map((t) => t.written));
    try {
      await this.store.transact(async (tx) => {
        for (const t of tallies) {
          const detail = { count: t.count, ...t.detail, first: isoTime(t.actor.at), last: isoTime(t.last) };
          // A row retention has dropped meanwhile (or whose first write failed) is written anew.
          const updated = t.id === undefined ? 0 : Number((await tx.updateTable("audit_log").set({ detail: JSON.stringify(detail) }).where("id", "=", t.id).executeTakeFirst()).numUpdatedRows);
          if (updated === 0) await recordAudit(tx, t.actor, "auth.refused", t.target, detail, "refused");
        }
        if (overflow) {
          const note = `refusals of more than ${this.limits.refusal_keys} clients and routes in one window`;
          await recordAudit(tx, systemActor("server", overflow.first), "auth.refused", "*", { count: overflow.count, first: isoTime(overflow.first), last: isoTime(overflow.last), note }, "refused");
        }
      });
    } catch (error) {
      this.log.warn(`audit: refusal counts not recorded: ${(error as Error).message}`);
    }
  }
}
