/*
 * The console span of each deployment attempt on a board: where the board's console was when the
 * attempt was offered, and what it printed from there to the outcome and for
 * `lab.console_after_outcome` seconds more (the boot after an install), kept beside the attempt's
 * history row (table lab_console_spans). The start is kept in memory: an attempt offered before
 * a restart leaves no span.
 */
import type { AppContext, Identity } from "../app/context.ts";
import type { Database } from "../db/index.ts";
import { getDevice } from "../update/devices/devices.ts";
import { attemptHistoryId, historyEntryExists } from "../update/deployments/store.ts";
import { authorizeSync } from "../update/permissions/legacy.ts";
import { LabgateError } from "../util/errors.ts";
import { after, isoTime } from "../util/time.ts";
import type { ConsoleService } from "./console.ts";

export interface SpanView {
  history_id: number;
  /** Console offsets of the span (GET .../console?since=start answers from there while it is kept). */
  start: number;
  end: number;
  bytes: number;
  at: string;
}

interface Open {
  deploymentId: number;
  attempt: number;
  from: number;
}

export class AttemptSpans {
  private readonly ctx: AppContext;
  private readonly db: Database;
  private readonly consoles: ConsoleService;
  /** Device id -> its attempt under way on a board with a console port. */
  private readonly open = new Map<number, Open>();
  /** Spans waiting for the boot after their outcome: saved at once at shutdown. */
  private readonly pending = new Map<() => void, () => Promise<void>>();

  constructor(ctx: AppContext, consoles: ConsoleService) {
    this.ctx = ctx;
    this.db = ctx.db;
    this.consoles = consoles;
  }

  /** An attempt was offered: its span starts where the board's console is now (nothing for a device without one). */
  offered(deploymentId: number, deviceId: number, attempt: number): void {
    if (!this.consoles.any) return;
    const device = getDevice(this.db, deviceId);
    const from = device && this.consoles.offsetOf(device);
    if (from === undefined) return void this.open.delete(deviceId);
    this.open.set(deviceId, { deploymentId, attempt, from });
  }

  /** The attempt ended: its span is saved with its history row once the boot after it was captured. */
  ended(deploymentId: number, deviceId: number, attempt: number): void {
    const span = this.open.get(deviceId);
    if (!span || span.deploymentId !== deploymentId || span.attempt !== attempt) return;
    this.open.delete(deviceId);
    const historyId = attemptHistoryId(this.db, deviceId, deploymentId, attempt);
    if (historyId !== undefined) this.later(historyId, deviceId, span.from);
  }

  /** The attempt's board was power-cycled (a deployment's `recover`): its span so far and the boot after, beside that history row; the attempt's own span goes on. */
  recovered(deploymentId: number, deviceId: number, attempt: number): void {
    const span = this.open.get(deviceId);
    if (!span || span.deploymentId !== deploymentId || span.attempt !== attempt) return;
    const historyId = attemptHistoryId(this.db, deviceId, deploymentId, attempt);
    if (historyId !== undefined) this.later(historyId, deviceId, span.from);
  }

  /** Saves what the board printed from `from` beside the history row `historyId`, after the boot time (recovery too). */
  later(historyId: number, deviceId: number, from: number): void {
    const save = () => this.save(historyId, deviceId, from);
    const cancel = after(this.ctx.clock, this.ctx.config.lab.console_after_outcome * 1000, () => {
      this.pending.delete(cancel);
      void save();
    });
    this.pending.set(cancel, save);
  }

  private async save(historyId: number, deviceId: number, from: number): Promise<void> {
    const device = getDevice(this.db, deviceId);
    const end = device && this.consoles.offsetOf(device);
    const bytes = device && this.consoles.span(device, from);
    if (!bytes || end === undefined) return;
    try {
      await this.db.write((tx) => {
        if (!historyEntryExists(tx, historyId)) return;
        tx.run("INSERT OR REPLACE INTO lab_console_spans (history_id, device_id, start, \"end\", bytes, at) VALUES (?, ?, ?, ?, ?, ?)", [historyId, deviceId, end - bytes.length, end, bytes, isoTime(this.ctx.clock.now())]);
      });
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
  list(identity: Identity, deviceId: number): SpanView[] {
    this.readable(identity, deviceId);
    return this.db.all<SpanView>("SELECT history_id, start, \"end\", length(bytes) AS bytes, at FROM lab_console_spans WHERE device_id = ? ORDER BY history_id DESC LIMIT 200", [deviceId]);
  }

  /** What the console printed during the attempt of history row `historyId` (404 when none was captured). */
  read(identity: Identity, deviceId: number, historyId: number): Buffer {
    this.readable(identity, deviceId);
    const row = this.db.get<{ bytes: Uint8Array }>("SELECT bytes FROM lab_console_spans WHERE history_id = ? AND device_id = ?", [historyId, deviceId]);
    if (!row) throw new LabgateError("not_found", "no console span was captured for this history entry");
    return Buffer.from(row.bytes);
  }

  private readable(identity: Identity, deviceId: number): void {
    authorizeSync(this.db, identity, "device", deviceId, "read");
    if (!getDevice(this.db, deviceId)) throw new LabgateError("not_found", "device does not exist");
  }
}
