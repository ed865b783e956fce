/*
 * Power control of the lab's boards: who may switch a board (`power` on the device, or
 * svc_admin_rw), the driver call, and what is remembered of it. An action is recorded (and
 * audited, in the same transaction) only once its driver said it was done: a PDU that fails or
 * does not answer leaves the last known state as it was.
 */
import type { Actor } from "../audit/audit.ts";
import { recordAudit } from "../audit/audit.ts";
import type { AppContext, Identity } from "../app/context.ts";
import type { Store } from "../db/store.ts";
import { getDevice, type DeviceRow } from "../update/devices/devices.ts";
import { allowed, authorize } from "../update/permissions/permissions.ts";
import { LabgateError } from "../util/errors.ts";
import { isoTime } from "../util/time.ts";
import type { BoardMap } from "./boards.ts";
import type { BoardConfig } from "../config/lab.ts";
import { createDriver, stateAfter, type DriverEnv, type PowerAction, type PowerDriver } from "./drivers.ts";

export interface PowerView {
  device_id: number;
  /** The board's power driver; null: the device has no power port in lab.boards. */
  driver: string | null;
  /** What the last successful action left the port in; `unknown` before the first. */
  state: "on" | "off" | "unknown";
  last_action: { action: PowerAction; by: string; at: string } | null;
  /** An action on this board is under way. */
  busy: boolean;
  /** The caller holds `power` on the device (the console shows its buttons). */
  may_switch: boolean;
  /** The board has a console port (GET /api/v2/devices/{id}/console). */
  console: boolean;
  /** The caller may write to it (`shell` on the device: the live console's input). */
  console_write: boolean;
}

export class PowerService {
  private readonly ctx: AppContext;
  private readonly store: Store;
  private readonly boards: BoardMap;
  private readonly env: DriverEnv;
  private readonly drivers = new Map<BoardConfig, PowerDriver>();
  /** Devices with an action under way: a second one is refused, not queued behind a PDU that may hang. */
  private readonly busy = new Set<number>();

  constructor(ctx: AppContext, boards: BoardMap, env: DriverEnv) {
    this.ctx = ctx;
    this.store = ctx.store;
    this.boards = boards;
    this.env = env;
  }

  /** The device and its board with a power port; 404 without the device, 409 when it has no power port. */
  private async boardOf(id: number): Promise<{ device: DeviceRow; board: BoardConfig & { power: NonNullable<BoardConfig["power"]> } }> {
    const device = (await getDevice(this.ctx.store.query, id));
    if (!device) throw new LabgateError("not_found", "device does not exist");
    const board = this.boards.of(device);
    if (!board) throw new LabgateError("conflict", `device ${device.name || device.mac_address} is not a board of lab.boards`);
    if (!board.power) throw new LabgateError("conflict", `board ${board.device} has no power port in lab.boards`);
    return { device, board: board as BoardConfig & { power: NonNullable<BoardConfig["power"]> } };
  }

  /** The last known state of a board's power: `read` on the device; a device without a power port has driver null. */
  async view(identity: Identity, id: number): Promise<PowerView> {
    await authorize(this.ctx.store.query, identity, "device", id, "read");
    const device = (await getDevice(this.ctx.store.query, id));
    if (!device) throw new LabgateError("not_found", "device does not exist");
    const board = this.boards.of(device);
    return { ...(await this.viewOf(identity, id, board?.power?.driver ?? null)), ...(await this.consoleOf(identity, id, board)) };
  }

  /** Switches a board's power: `power` on the device; resolves once the driver did it. */
  async act(identity: Identity, actor: Actor, id: number, action: PowerAction): Promise<PowerView> {
    await authorize(this.ctx.store.query, identity, "device", id, "power");
    const board = await this.switch(actor, id, action);
    return { ...(await this.viewOf(identity, id, board.power.driver)), ...(await this.consoleOf(identity, id, board)) };
  }

  private async consoleOf(identity: Identity, id: number, board: BoardConfig | undefined): Promise<Pick<PowerView, "console" | "console_write">> {
    const console = board?.serial !== undefined;
    return { console, console_write: console && (await allowed(this.ctx.store.query, identity, "device", id, "shell")) };
  }

  /** Whether the device is a board with a power port (a deployment's `recover` cycles only those). */
  hasPort(device: { mac_address: string; name: string }): boolean {
    return this.boards.of(device)?.power !== undefined;
  }

  /**
   * Switches a board's power for `actor`, whose authority the caller checked (act; the
   * deployments' own recovery acts as system:deployment); recorded and audited once done.
   */
  async switch(actor: Actor, id: number, action: PowerAction): Promise<BoardConfig & { power: NonNullable<BoardConfig["power"]> }> {
    const { board } = await this.boardOf(id);
    if (this.busy.has(id)) throw new LabgateError("conflict", `a power action on board ${board.device} is under way`);
    let driver = this.drivers.get(board);
    if (!driver) this.drivers.set(board, (driver = createDriver(board.power, this.env)));
    this.busy.add(id);
    try {
      await driver(action);
    } finally {
      this.busy.delete(id);
    }
    await this.store.transact(async (tx) => {
      // The device may have gone while the PDU worked: nothing to remember then.
      if (!(await getDevice(tx, id))) return;
      const row = { state: stateAfter(action), action, actor: actor.name, at: isoTime(actor.at) };
      await tx
        .insertInto("lab_power")
        .values({ device_id: id, ...row })
        .onConflict((oc) => oc.column("device_id").doUpdateSet(row))
        .execute();
      await recordAudit(tx, actor, `power.${action}`, `device:${id}`, { board: board.device, driver: board.power.driver });
    });
    return board;
  }

  private async viewOf(identity: Identity, id: number, driver: string | null): Promise<Omit<PowerView, "console" | "console_write">> {
    const row = await this.store.query.selectFrom("lab_power").select(["state", "action", "actor", "at"]).where("device_id", "=", id).executeTakeFirst();
    return {
      device_id: id,
      driver,
      state: (row?.state as "on" | "off" | undefined) ?? "unknown",
      last_action: row ? { action: row.action as PowerAction, by: row.actor, at: row.at } : null,
      busy: this.busy.has(id),
      may_switch: driver !== null && (await allowed(this.ctx.store.query, identity, "device", id, "power")),
    };
  }
}
