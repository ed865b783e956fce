/*
 * The audit log: every change, recorded in the transaction that makes it, so that an
 * acknowledged change is in the log and a rolled-back one is not; refused authorizations are
 * recorded too, counted per client and route (refusals.ts). A domain records with one line inside its `db.write`:
 *
 *   recordAudit(tx, actor, "group.devices", `group:${id}`, { add, remove });
 *
 * The actor comes from the caller (`actorFor`: the account or token and the client address; the
 * HTTP layer's `actorOf(c)` reads them from a request)
 * or is `systemActor(...)` for the CLI and the server's own work. Details are small and never
 * carry secrets (passwords, tokens, keys). Old rows go in batches off the request path
 * (`AuditRetention`), by age and by count.
 */
import { userInfo } from "node:os";
import type { AppContext, Identity } from "../app/context.ts";
import type { Database } from "../db/index.ts";
import type { Tx as SyncTx } from "../db/index.ts";
import type { Queries } from "../db/store.ts";
import { csvCell } from "../util/csv.ts";
import { dateOf, every, isoTime, type Clock } from "../util/time.ts";
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

/** The row of an entry, its detail as JSON text. */
function auditRow(actor: Actor, action: string, target: string, detail: Record<string, unknown> | undefined, outcome: Outcome) {
  let text = detail === undefined ? null : JSON.stringify(detail);
  if (text !== null && text.length > MAX_DETAIL) text = JSON.stringify({ truncated: true, bytes: text.length });
  return { time: isoTime(actor.at), actor_kind: actor.kind, actor: actor.name, token_id: actor.tokenId, client: actor.client, action, target, outcome, detail: text };
}

/**
 * Records one entry in `q`, the transaction of the change it describes (or the store's query: a
 * transaction of its own); resolves with its id. A synchronous `db.write`'s transaction is still
 * taken, and written to at once, until every area's transactions are the Store's.
 */
export function recordAudit(q: Queries, actor: Actor, action: string, target: string, detail?: Record<string, unknown>, outcome?: Outcome): Promise<number>;
export function recordAudit(tx: Pick<SyncTx, "run">, actor: Actor, action: string, target: string, detail?: Record<string, unknown>, outcome?: Outcome): number;
export function recordAudit(q: Queries | Pick<SyncTx, "run">, actor: Actor, action: string, target: string, detail?: Record<string, unknown>, outcome: Outcome = "ok"): Promise<number> | number {
  const row = auditRow(actor, action, target, detail, outcome);
  if ("run" in q) {
    const columns = Object.keys(row);
    return q.run(`INSERT INTO audit_log (${columns.join(", ")}) VALUES (${columns.map(() => "?").join(", ")})`, Object.values(row)).lastInsertRowid;
  }
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
export async function recordChange(ctx: Pick<AppContext, "db">, actor: Actor, action: string, target: string, detail?: Record<string, unknown>): Promise<void> {
  await ctx.db.write((tx) => recordAudit(tx, actor, action, target, detail));
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

function where(filter: AuditFilter): { sql: string; params: string[] } {
  const terms: string[] = [];
  const params: string[] = [];
  if (filter.since !== undefined) terms.push("time >= ?"), params.push(filter.since);
  if (filter.until !== undefined) terms.push("time < ?"), params.push(filter.until);
  if (filter.actor !== undefined) terms.push("actor = ?"), params.push(filter.actor);
  if (filter.target !== undefined) terms.push("target = ?"), params.push(filter.target);
  if (filter.outcome !== undefined) terms.push("outcome = ?"), params.push(filter.outcome);
  if (filter.action !== undefined) {
    // An exact name, or everything below a dotted prefix (`device` or `device.`).
    const prefix = filter.action.replace(/\.$/, "");
    terms.push("(action = ? OR substr(action, 1, ?) = ?)");
    params.push(prefix, String(prefix.length + 1), `${prefix}.`);
  }
  return { sql: terms.length ? ` WHERE ${terms.join(" AND ")}` : "", params };
}

interface AuditRow extends Omit<AuditEntry, "detail"> {
  detail: string | null;
}

const toEntry = (row: AuditRow): AuditEntry => ({ ...row, detail: row.detail === null ? null : (JSON.parse(row.detail) as Record<string, unknown>) });

const COLUMNS = "id, time, actor_kind, actor, token_id, client, action, target, outcome, detail";

/** A page of matching entries, newest first. */
export function listAudit(db: Database, filter: AuditFilter, page: { limit: number; offset: number }): AuditEntry[] {
  const { sql, params } = where(filter);
  return db.all<AuditRow>(`SELECT ${COLUMNS} FROM audit_log${sql} ORDER BY id DESC LIMIT ? OFFSET ?`, [...params, page.limit, page.offset]).map(toEntry);
}

export function countAudit(db: Database, filter: AuditFilter): number {
  const { sql, params } = where(filter);
  return db.get<{ n: number }>(`SELECT COUNT(*) AS n FROM audit_log${sql}`, params)?.n ?? 0;
}

const CSV_COLUMNS = ["id", "time", "actor_kind", "actor", "token_id", "client", "action", "target", "outcome", "detail"] as const;
/** A cell: no formula a spreadsheet would run (util/csv.ts), quoted when it holds a quote, comma or line break. */
const csvField = (value: string | number | null): string => {
  const text = csvCell(value);
  return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
};
/** Rows read per step of a CSV export: memory stays flat whatever the log holds. */
const CSV_BATCH = 1000;

/**
 * Every matching entry as CSV, newest first, read in batches as the client takes them (a pull
 * stream: a slow reader holds one batch, never the log).
 */
export function auditCsv(db: Database, filter: AuditFilter): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  const { sql, params } = where(filter);
  const and = sql ? `${sql} AND` : " WHERE";
  let before = Number.MAX_SAFE_INTEGER;
  let header = true;
  return new ReadableStream<Uint8Array>({
    pull(controller) {
      const rows = db.all<AuditRow>(`SELECT ${COLUMNS} FROM audit_log${and} id < ? ORDER BY id DESC LIMIT ?`, [...params, before, CSV_BATCH]);
      let text = header ? `${CSV_COLUMNS.join(",")}\r\n` : "";
      header = false;
      for (const row of rows) text += `${CSV_COLUMNS.map((column) => csvField(row[column])).join(",")}\r\n`;
      if (text) controller.enqueue(encoder.encode(text));
      if (rows.length < CSV_BATCH) controller.close();
      else before = rows[rows.length - 1].id;
    },
  });
}

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

/**
 * Keeps the log within `retention_days`, `max_rows` and `max_refusal_rows`: every
 * `retention_interval` s (and once at start) the oldest rows go, a batch per event-loop turn, so
 * requests are served in between.
 */
export class AuditRetention {
  private stopSweeps: (() => void) | undefined;
  private current: Promise<number> | undefined;
  private readonly db: Database;
  private readonly clock: Clock;
  private readonly log: Logger;
  private readonly limits: RetentionLimits;

  constructor(db: Database, clock: Clock, log: Logger, limits: RetentionLimits) {
    this.db = db;
    this.clock = clock;
    this.log = log;
    this.limits = limits;
  }

  start(): void {
    this.stopSweeps = every(this.clock, this.limits.retention_interval * 1000, () => void this.sweep());
    setImmediate(() => void this.sweep());
  }

  stop(): void {
    this.stopSweeps?.();
  }

  /** Drops what is past the limits, batch by batch; resolves with how many rows went (a sweep under way: that one). */
  sweep(): Promise<number> {
    this.current ??= this.drop().finally(() => (this.current = undefined));
    return this.current;
  }

  /** How many rows are past each bound now; read first, so that a sweep with nothing to drop writes nothing. */
  private excess(cutoff: string): { old: boolean; refusals: number; changes: number } {
    const old = this.db.get("SELECT 1 AS x FROM audit_log WHERE time < ? LIMIT 1", [cutoff]) !== undefined;
    // Through the partial index of refused rows: as many as the refusal budget holds, at most.
    const refused = this.db.get<{ n: number }>("SELECT COUNT(*) AS n FROM audit_log WHERE outcome = 'refused'")?.n ?? 0;
    // Two queries: SQLite answers a lone MIN or MAX from the index, both in one query by scanning every row.
    const low = this.db.get<{ id: number | null }>("SELECT MIN(id) AS id FROM audit_log")?.id;
    const high = this.db.get<{ id: number | null }>("SELECT MAX(id) AS id FROM audit_log")?.id;
    // Ids only grow, so the rows are at most the span of their ids; only a span past the bound needs the count.
    const span = low != null && high != null ? high - low + 1 : 0;
    const total = span - refused > this.limits.max_rows ? (this.db.get<{ n: number }>("SELECT COUNT(*) AS n FROM audit_log")?.n ?? 0) : span;
    return { old, refusals: Math.max(0, refused - this.limits.max_refusal_rows), changes: Math.max(0, total - refused - this.limits.max_rows) };
  }

  private async drop(): Promise<number> {
    let dropped = 0;
    try {
      const cutoff = isoTime(this.clock.now() - this.limits.retention_days * 86_400_000);
      for (let due = this.excess(cutoff); due.old || due.refusals > 0 || due.changes > 0; due = this.excess(cutoff)) {
        // Each through an index: by time, refusals by the partial index of refused rows, changes by id.
        // Old rows first and alone in their step: what they take changes what is past the counts.
        dropped += await this.db.write((tx) => {
          if (due.old) return tx.run("DELETE FROM audit_log WHERE id IN (SELECT id FROM audit_log WHERE time < ? ORDER BY time LIMIT ?)", [cutoff, RETENTION_BATCH]).changes;
          const oldest = (outcome: string, n: number) =>
            n > 0 ? tx.run(`DELETE FROM audit_log WHERE id IN (SELECT id FROM audit_log WHERE outcome ${outcome} ORDER BY id LIMIT ?)`, [n]).changes : 0;
          const refusals = oldest("= 'refused'", Math.min(RETENTION_BATCH, due.refusals));
          return refusals + oldest("<> 'refused'", Math.min(RETENTION_BATCH - refusals, due.changes));
        });
        await new Promise((resolve) => setImmediate(resolve));
      }
    } catch (error) {
      this.log.warn(`audit: retention: ${(error as Error).message}`);
    }
    return dropped;
  }
}
