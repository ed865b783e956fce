/*
 * The audit log: every change, recorded in the transaction that makes it, so that an
 * acknowledged change is in the log and a rolled-back one is not; refused authorizations are
 * recorded too, counted per client and route (refusals.ts). A domain records with one line inside its `store.transact`:
 *
 *   await recordAudit(tx, actor, "group.devices", `group:${id}`, { add, remove });
 *
 * The actor comes from the caller (`actorFor`: the account or token and the client address; the
 * HTTP layer's `actorOf(c)` reads them from a request)
 * or is `systemActor(...)` for the CLI and the server's own work. Details are small and never
 * carry secrets (passwords, tokens, keys). Old rows go in batches off the request path
 * (`AuditRetention`), by age and by count.
 */
import { userInfo } from "node:os";
import type { AppContext, Identity } from "../app/context.ts";
import type { Queries, Store } from "../db/store.ts";
import { sql, type Selectable, type SelectQueryBuilder } from "kysely";
import type { AuditLogTable, Tables } from "../db/schema.ts";
import { csvCell } from "../util/csv.ts";
import { after, dateOf, every, isoTime, type Clock } from "../util/time.ts";
import type { Logger } from "../util/log.ts";
import type { ActorKind, AuditEntry, Outcome } from "./schema.ts";

/** Who acts: a console account (a session), a management token, a device, the system (CLI, server), or nobody known (`anonymous`). */
export interface Actor {
  kind: ActorKind;
  /** The account or token user, the device's MAC address, what the system is (`cli`, `server`), or `anonymous`. */
  name: string;
  /** The management token's id (`jti`), else null. */
  tokenId: string | null;
  /** The client address ("" for the CLI). */
  client: string;
  at: Date;
}

/** A detail larger than this is replaced by a note: the log says who did what, not every byte of it. */
const MAX_DETAIL = 2048;

/** Who calls, as the audit log needs it: the identity (when authenticated) and the client address. */
export interface Caller {
  identity: Identity | undefined;
  client: string;
}

/** The actor of a caller, acting now. */
export function actorFor({ identity, client }: Caller, clock: Clock): Actor {
  const at = dateOf(clock);
  if (!identity) return { kind: "anonymous", name: "anonymous", tokenId: null, client, at };
  if (identity.kind === "device") return { kind: "device", name: identity.mac, tokenId: null, client, at };
  return { kind: identity.session === undefined ? "token" : "account", name: identity.user, tokenId: identity.jti ?? null, client, at };
}

/** The system acting on its own (`server`: retention, restarts) or a command on this machine (`cli:<user>`). */
export const systemActor = (name: string, at: Date): Actor => ({ kind: "system", name, tokenId: null, client: "", at });

/** How the audit log names a command of this machine's CLI: `cli:<login name>`. */
export function cliName(): string {
  let user = "unknown";
  try {
    user = userInfo().username;
  } catch {
    // No passwd entry for this uid (a container): "unknown".
  }
  return `cli:${user}`;
}

/** A command of this machine's CLI acting on the data dir itself (no server runs, or it writes the spool). */
export const cliActor = (at = new Date()): Actor => systemActor(cliName(), at);

/** A text from a request as a column holds it: a NUL (a name tried at login) as U+FFFD, since PostgreSQL's text holds none. */
const storable = (text: string): string => text.replace(/\0/g, "\uFFFD");

/** The row of an entry, its detail as JSON text. */
function auditRow(actor: Actor, action: string, target: string, detail: Record<string, unknown> | undefined, outcome: Outcome) {
  let text = detail === undefined ? null : JSON.stringify(detail);
  if (text !== null && text.length > MAX_DETAIL) text = JSON.stringify({ truncated: true, bytes: text.length });
  return { time: isoTime(actor.at), actor_kind: actor.kind, actor: storable(actor.name), token_id: actor.tokenId, client: actor.client, action, target: storable(target), outcome, detail: text };
}

/**
 * Records one entry in `q`, the transaction of the change it describes (or the store's query: a
 * transaction of its own); resolves with its id.
 */
export function recordAudit(q: Queries, actor: Actor, action: string, target: string, detail?: Record<string, unknown>, outcome: Outcome = "ok"): Promise<number> {
  const row = auditRow(actor, action, target, detail, outcome);
  return q
    .insertInto("audit_log")
    .values(row)
    .returning("id")
    .executeTakeFirstOrThrow()
    .then(({ id }) => id);
}

/**
 * Records a change that is not a database transaction (a config file, a test run's processes, a
 * backup's stream) in a transaction of its own, right after the change and before the answer.
 */
export async function recordChange(ctx: Pick<AppContext, "store">, actor: Actor, action: string, target: string, detail?: Record<string, unknown>): Promise<void> {
  await recordAudit(ctx.store.query, actor, action, target, detail);
}

/** What GET /api/v1/audit selects; every given condition holds. */
export interface AuditFilter {
  /** ISO times: from (inclusive), until (exclusive). */
  since?: string;
  until?: string;
  actor?: string;
  /** An action or a prefix of dotted names: `device` selects device.approve, device.delete, ... */
  action?: string;
  target?: string;
  outcome?: Outcome;
}

/** The entries `filter` selects. */
function matching(q: Queries, filter: AuditFilter) {
  let query = q.selectFrom("audit_log");
  if (filter.since !== undefined) query = query.where("time", ">=", filter.since);
  if (filter.until !== undefined) query = query.where("time", "<", filter.until);
  if (filter.actor !== undefined) query = query.where("actor", "=", filter.actor);
  if (filter.target !== undefined) query = query.where("target", "=", filter.target);
  if (filter.outcome !== undefined) query = query.where("outcome", "=", filter.outcome);
  if (filter.action !== undefined) {
    // An exact name, or everything below a dotted prefix (`device` or `device.`).
    const prefix = filter.action.replace(/\.$/, "");
    query = query.where((eb) => eb.or([eb("action", "=", prefix), eb(eb.fn<string>("substr", ["action", eb.val(1), eb.val(prefix.length + 1)]), "=", `${prefix}.`)]));
  }
  return query;
}

const COLUMNS = ["id", "time", "actor_kind", "actor", "token_id", "client", "action", "target", "outcome", "detail"] as const;

type AuditRow = Pick<Selectable<AuditLogTable>, (typeof COLUMNS)[number]>;

const toEntry = (row: AuditRow): AuditEntry => ({
  ...row,
  actor_kind: row.actor_kind as ActorKind,
  outcome: row.outcome as Outcome,
  detail: row.detail === null ? null : (JSON.parse(row.detail) as Record<string, unknown>),
});

/** A page of matching entries, newest first. */
export async function listAudit(q: Queries, filter: AuditFilter, page: { limit: number; offset: number }): Promise<AuditEntry[]> {
  const rows = await matching(q, filter).select(COLUMNS).orderBy("id", "desc").limit(page.limit).offset(page.offset).execute();
  return rows.map(toEntry);
}

export async function countAudit(q: Queries, filter: AuditFilter): Promise<number> {
  const row = await matching(q, filter)
    .select((eb) => eb.fn.countAll<number>().as("n"))
    .executeTakeFirst();
  return row?.n ?? 0;
}

/** A cell: no formula a spreadsheet would run (util/csv.ts), quoted when it holds a quote, comma or line break. */
const csvField = (value: string | number | null): string => {
  const text = csvCell(value);
  return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
};
/** Rows read per step of a CSV export: memory stays flat whatever the log holds. */
const CSV_BATCH = 1000;

/**
 * Every matching entry as CSV, newest first, read in batches as the client takes them (a pull
 * stream: a slow reader holds one batch, never the log). Each step reads one span of ids below the
 * last row sent: unbounded below, PostgreSQL reads every older row for each batch when it expects
 * few to match (an action prefix), which makes the export quadratic. The span halves when it held a
 * full batch and doubles when it did not, so a step reads about a batch's worth of matching rows.
 */
export function auditCsv(q: Queries, filter: AuditFilter): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  let header = true;
  // Ids of the rows at the start: entries written during the export are not in it.
  let low = 0;
  let before = 0;
  let span = CSV_BATCH;
  return new ReadableStream<Uint8Array>({
    async start() {
      // Two queries: SQLite answers a lone MIN or MAX from the index, both in one query by scanning every row.
      low = (await q.selectFrom("audit_log").select((eb) => eb.fn.min("id").as("id")).executeTakeFirst())?.id ?? 0;
      before = ((await q.selectFrom("audit_log").select((eb) => eb.fn.max("id").as("id")).executeTakeFirst())?.id ?? -1) + 1;
    },
    async pull(controller) {
      let text = header ? `${COLUMNS.join(",")}\r\n` : "";
      header = false;
      // A span without a matching row sends nothing: read on until one has some or the log ends.
      for (let sent = false; !sent && before > low; ) {
        const from = Math.max(low, before - span);
        const rows = await matching(q, filter).select(COLUMNS).where("id", ">=", from).where("id", "<", before).orderBy("id", "desc").limit(CSV_BATCH).execute();
        for (const row of rows) text += `${COLUMNS.map((column) => csvField(row[column])).join(",")}\r\n`;
        sent = rows.length > 0;
        if (rows.length === CSV_BATCH) {
          before = rows[rows.length - 1].id;
          span = Math.max(CSV_BATCH, span / 2);
        } else {
          before = from;
          span *= 2;
        }
      }
      if (text) controller.enqueue(encoder.encode(text));
      if (before <= low) controller.close();
    },
  });
}

/** The outcome of refused rows, as a literal: SQLite uses the partial index of refused rows only for the literal its condition names. */
const REFUSED = sql.lit("refused");

/** Rows dropped per step of retention: a step is one short transaction. */
const RETENTION_BATCH = 5000;

export interface RetentionLimits {
  retention_days: number;
  /** Rows of changes (outcome `ok`) kept. */
  max_rows: number;
  /** Rows of refusals (outcome `refused`) kept, apart: refusals never push out the rows of changes. */
  max_refusal_rows: number;
  retention_interval: number;
}

/** How long after the start the first sweep runs: its queries need not hold up the start's first answers. */
const FIRST_SWEEP_DELAY_MS = 1_000;

/**
 * Keeps the log within `retention_days`, `max_rows` and `max_refusal_rows`: every
 * `retention_interval` s (and once shortly after the start) the oldest rows go, a batch per
 * event-loop turn, so requests are served in between.
 */
export class AuditRetention {
  private stopSweeps: (() => void) | undefined;
  private cancelFirstSweep: (() => void) | undefined;
  private current: Promise<number> | undefined;
  private readonly store: Store;
  private readonly clock: Clock;
  private readonly log: Logger;
  private readonly limits: RetentionLimits;

  constructor(store: Store, clock: Clock, log: Logger, limits: RetentionLimits) {
    this.store = store;
    this.clock = clock;
    this.log = log;
    this.limits = limits;
  }

  /** `mine`: whether this node sweeps now (one node of a cluster at a time). */
  start(mine: () => boolean = () => true): void {
    this.stopSweeps = every(this.clock, this.limits.retention_interval * 1000, () => void (mine() && this.sweep()));
    this.cancelFirstSweep = after(this.clock, FIRST_SWEEP_DELAY_MS, () => void (mine() && this.sweep()));
  }

  stop(): void {
    this.stopSweeps?.();
    this.cancelFirstSweep?.();
  }

  /** Drops what is past the limits, batch by batch; resolves with how many rows went (a sweep under way: that one). */
  sweep(): Promise<number> {
    this.current ??= this.drop().finally(() => (this.current = undefined));
    return this.current;
  }

  /** How many rows are past each bound now; read first, so that a sweep with nothing to drop writes nothing. */
  private async excess(cutoff: string): Promise<{ old: boolean; refusals: number; changes: number }> {
    const q = this.store.query;
    const old = (await q.selectFrom("audit_log").select("id").where("time", "<", cutoff).limit(1).executeTakeFirst()) !== undefined;
    // Through the partial index of refused rows (a literal, as the index says it): as many as the refusal budget holds, at most.
    const refused = (await q.selectFrom("audit_log").select((eb) => eb.fn.countAll<number>().as("n")).where("outcome", "=", REFUSED).executeTakeFirst())?.n ?? 0;
    // Two queries: SQLite answers a lone MIN or MAX from the index, both in one query by scanning every row.
    const low = (await q.selectFrom("audit_log").select((eb) => eb.fn.min("id").as("id")).executeTakeFirst())?.id;
    const high = (await q.selectFrom("audit_log").select((eb) => eb.fn.max("id").as("id")).executeTakeFirst())?.id;
    // Ids only grow, so the rows are at most the span of their ids; only a span past the bound needs the count.
    const span = low != null && high != null ? high - low + 1 : 0;
    const total = span - refused > this.limits.max_rows ? ((await q.selectFrom("audit_log").select((eb) => eb.fn.countAll<number>().as("n")).executeTakeFirst())?.n ?? 0) : span;
    return { old, refusals: Math.max(0, refused - this.limits.max_refusal_rows), changes: Math.max(0, total - refused - this.limits.max_rows) };
  }

  private async drop(): Promise<number> {
    let dropped = 0;
    try {
      const cutoff = isoTime(this.clock.now() - this.limits.retention_days * 86_400_000);
      for (let due = await this.excess(cutoff); due.old || due.refusals > 0 || due.changes > 0; due = await this.excess(cutoff)) {
        // Each through an index: by time, refusals by the partial index of refused rows, changes by id.
        // Old rows first and alone in their step: what they take changes what is past the counts.
        dropped += await this.store.transact(async (tx) => {
          const removed = (ids: SelectQueryBuilder<Tables, "audit_log", { id: number }>) => tx.deleteFrom("audit_log").where("id", "in", ids).executeTakeFirst().then((r) => Number(r.numDeletedRows));
          if (due.old) return removed(tx.selectFrom("audit_log").select("id").where("time", "<", cutoff).orderBy("time").limit(RETENTION_BATCH));
          const oldest = (refusals: boolean, n: number) =>
            n > 0 ? removed(tx.selectFrom("audit_log").select("id").where("outcome", refusals ? "=" : "<>", REFUSED).orderBy("id").limit(n)) : Promise.resolve(0);
          const refusals = await oldest(true, Math.min(RETENTION_BATCH, due.refusals));
          return refusals + (await oldest(false, Math.min(RETENTION_BATCH - refusals, due.changes)));
        });
        await new Promise((resolve) => setImmediate(resolve));
      }
    } catch (error) {
      this.log.warn(`audit: retention: ${(error as Error).message}`);
    }
    return dropped;
  }
}
