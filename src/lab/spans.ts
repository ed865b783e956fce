/*
 * The console span of each deployment attempt on a board: where the board's console was when the
 * attempt was offered, and what it printed from there to the outcome and for
 * `lab.console_after_outcome` seconds more (the boot after an install), kept beside the attempt's
 * history row (table lab_console_spans). A board's attempt under way is kept too (lab_open_spans),
 * with whether `recover` cycled it already: a restart loses neither.
 */
import type { AppContext, Identity } from "../app/context.ts";
import { prepared } from "../db/prepared.ts";
import type { Queries, Store } from "../db/store.ts";
import { getDevice } from "../update/devices/devices.ts";
import { attemptHistoryId, historyEntryExists } from "../update/deployments/store.ts";
import { allowed, authorize } from "../update/permissions/permissions.ts";
import { LabgateError } from "../util/errors.ts";
import { after, isoTime } from "../util/time.ts";
import type { BoardMap } from "./boards.ts";
import type { ConsoleService } from "./console.ts";

export interface SpanView {
  history_id: number;
  /** Console offsets of the span (GET .../console?since=start answers from there while it is kept). */
  start: number;
  end: number;
  bytes: number;
  at: string;
}

/** A span on a deployment's page: whose attempt it is. */
export interface DeploymentSpanView {
  device_id: number;
  attempt: number;
  history_id: number;
  bytes: number;
  at: string;
}

/** Asked at the end of every deployment attempt, boards or not. */
const openSpan = prepared((q: Queries, deviceId: number, deploymentId: number, attempt: number) =>
  q.selectFrom("lab_open_spans").select(["start", "recovered"]).where("device_id", "=", deviceId).where("deployment_id", "=", deploymentId).where("attempt", "=", attempt),
);

export class AttemptSpans {
  private readonly ctx: AppContext;
  private readonly store: Store;
  private readonly boards: BoardMap;
  private readonly consoles: ConsoleService;
  /** Spans waiting for the boot after their outcome: saved at once at shutdown. */
  private readonly pending = new Map<() => void, () => Promise<void>>();

  constructor(ctx: AppContext, boards: BoardMap, consoles: ConsoleService) {
    this.ctx = ctx;
    this.store = ctx.store;
    this.boards = boards;
    this.consoles = consoles;
  }

  /** An attempt was offered: on a board, it is kept with where the board's console is now (the start of its span; none without a console port). */
  async offered(deploymentId: number, deviceId: number, attempt: number): Promise<void> {
    if (this.boards.size === 0) return;
    const device = (await getDevice(this.ctx.store.query, deviceId));
    if (!device || !this.boards.of(device)) return;
    const row = { deployment_id: deploymentId, attempt, start: this.consoles.offsetOf(device) ?? null, recovered: null };
    await this.store.query
      .insertInto("lab_open_spans")
      .values({ device_id: deviceId, ...row })
      .onConflict((oc) => oc.column("device_id").doUpdateSet(row))
      .execute();
  }

  /** The board's attempt under way, when it is this one. */
  private async openOf(deploymentId: number, deviceId: number, attempt: number) {
    return (await openSpan(this.store.query, deviceId, deploymentId, attempt)).rows[0];
  }

  /** The attempt ended: its span is saved with its history row once the boot after it was captured. */
  async ended(deploymentId: number, deviceId: number, attempt: number): Promise<void> {
    const open = await this.openOf(deploymentId, deviceId, attempt);
    if (!open) return;
    await this.store.query.deleteFrom("lab_open_spans").where("device_id", "=", deviceId).where("deployment_id", "=", deploymentId).where("attempt", "=", attempt).execute();
    const historyId = open.start === null ? undefined : await attemptHistoryId(this.store.query, deviceId, deploymentId, attempt);
    if (historyId !== undefined) this.later(historyId, deviceId, open.start!, { deploymentId, attempt });
  }

  /**
   * `recover` is about to power-cycle the attempt's board: marks it, on disk before the PDU is
   * asked; false when it was marked already (a board is cycled once per attempt, across restarts).
   */
  async markRecovered(deploymentId: number, deviceId: number, attempt: number, at: Date): Promise<boolean> {
    return this.store.transact(async (tx) => {
      const open = await tx.selectFrom("lab_open_spans").select(["deployment_id", "attempt", "recovered"]).where("device_id", "=", deviceId).executeTakeFirst();
      if (open?.deployment_id === deploymentId && open.attempt === attempt) {
        if (open.recovered !== null) return false;
        await tx.updateTable("lab_open_spans").set({ recovered: isoTime(at) }).where("device_id", "=", deviceId).execute();
        return true;
      }
      // Offered before the board was a board (or its row was lost): the mark alone, no span.
      const row = { deployment_id: deploymentId, attempt, start: null, recovered: isoTime(at) };
      await tx
        .insertInto("lab_open_spans")
        .values({ device_id: deviceId, ...row })
        .onConflict((oc) => oc.column("device_id").doUpdateSet(row))
        .execute();
      return true;
    });
  }

  /** The attempt's board was power-cycled (a deployment's `recover`): its span so far and the boot after, beside that history row; the attempt's own span goes on. */
  async recovered(deploymentId: number, deviceId: number, attempt: number): Promise<void> {
    const open = await this.openOf(deploymentId, deviceId, attempt);
    if (open?.start === null || open?.start === undefined) return;
    const historyId = await attemptHistoryId(this.store.query, deviceId, deploymentId, attempt);
    if (historyId !== undefined) this.later(historyId, deviceId, open.start, { deploymentId, attempt });
  }

  /** Saves what the board printed from `from` beside the history row `historyId`, after the boot time (recovery too). */
  later(historyId: number, deviceId: number, from: number, of: { deploymentId: number; attempt: number }): void {
    const save = () => this.save(historyId, deviceId, from, of);
    const cancel = after(this.ctx.clock, this.ctx.config.lab.console_after_outcome * 1000, () => {
      this.pending.delete(cancel);
      void save();
    });
    this.pending.set(cancel, save);
  }

  private async save(historyId: number, deviceId: number, from: number, of: { deploymentId: number; attempt: number }): Promise<void> {
    const device = (await getDevice(this.ctx.store.query, deviceId));
    const end = device && this.consoles.offsetOf(device);
    const bytes = device && this.consoles.span(device, from);
    if (!bytes || end === undefined) return;
    try {
      // The history row may have been trimmed meanwhile: nothing to keep the span beside then.
      if (!(await historyEntryExists(this.store.query, historyId))) return;
      const row = { device_id: deviceId, deployment_id: of.deploymentId, attempt: of.attempt, start: end - bytes.length, end, bytes, at: isoTime(this.ctx.clock.now()) };
      await this.store.query
        .insertInto("lab_console_spans")
        .values({ history_id: historyId, ...row })
        .onConflict((oc) => oc.column("history_id").doUpdateSet(row))
        .execute();
    } catch (error) {
      this.ctx.log.warn(`lab: console span of device ${deviceId} not saved: ${(error as Error).message}`);
    }
  }

  /** Shutdown: the spans still capturing the boot are saved as they are. */
  async flush(): Promise<void> {
    const saves = [...this.pending];
    this.pending.clear();
    for (const [cancel, save] of saves) {
      cancel();
      await save();
    }
  }

  /** The device's attempts with a console span (`read` on the device, as its history), newest first. */
  async list(identity: Identity, deviceId: number): Promise<SpanView[]> {
    await this.readable(identity, deviceId);
    return this.store.query
      .selectFrom("lab_console_spans")
      .select((eb) => ["history_id", "start", "end", eb.fn<number>("length", ["bytes"]).as("bytes"), "at"])
      .where("device_id", "=", deviceId)
      .orderBy("history_id", "desc")
      .limit(200)
      .execute();
  }

  /** The console spans of a deployment's attempts on the devices `identity` may read (a span is the device's, as its history), newest first. */
  async ofDeployment(identity: Identity, deploymentId: number): Promise<DeploymentSpanView[]> {
    const rows = await this.store.query
      .selectFrom("lab_console_spans")
      .select((eb) => ["device_id", "attempt", "history_id", eb.fn<number>("length", ["bytes"]).as("bytes"), "at"])
      .where("deployment_id", "=", deploymentId)
      .orderBy("history_id", "desc")
      .limit(1000)
      .execute();
    const readable = await Promise.all(rows.map((r) => allowed(this.ctx.store.query, identity, "device", r.device_id, "read")));
    return rows.filter((_, i) => readable[i]).map((r) => ({ ...r, attempt: r.attempt ?? 1 }));
  }

  /** What the console printed during the attempt of history row `historyId` (404 when none was captured). */
  async read(identity: Identity, deviceId: number, historyId: number): Promise<Buffer> {
    await this.readable(identity, deviceId);
    const row = await this.store.query.selectFrom("lab_console_spans").select("bytes").where("history_id", "=", historyId).where("device_id", "=", deviceId).executeTakeFirst();
    if (!row) throw new LabgateError("not_found", "no console span was captured for this history entry");
    return Buffer.from(row.bytes);
  }

  private async readable(identity: Identity, deviceId: number): Promise<void> {
    await authorize(this.ctx.store.query, identity, "device", deviceId, "read");
    if (!(await getDevice(this.ctx.store.query, deviceId))) throw new LabgateError("not_found", "device does not exist");
  }
}
