/*
 * The board map: which managed device is which board of `lab.boards` (the config file) or of the
 * boards an administrator set through the API (table lab_boards). A board names its device by MAC
 * address or by name, so a renamed device may stop (or start) being a board: the map is asked
 * with the device as it is now. A board of the config file cannot be changed through the API.
 */
import { recordAudit, type Actor } from "../audit/audit.ts";
import type { Store } from "../db/store.ts";
import { LabgateError } from "../util/errors.ts";
import { isoTime } from "../util/time.ts";
import { boardKey, readBoard, type BoardConfig } from "../config/lab.ts";

export interface BoardDevice {
  mac_address: string;
  name: string;
}

export interface BoardEntry {
  board: BoardConfig;
  /** `config`: lab.boards of the config file; `api`: set by an administrator. */
  source: "config" | "api";
}

/** What a change of an API board means to those who hold its ports open (the console captures). */
export type BoardChange = (before: BoardConfig | undefined, after: BoardConfig | undefined) => void;

export class BoardMap {
  private readonly byKey = new Map<string, BoardEntry>();
  private readonly store: Store | undefined;
  private readonly changes: BoardChange[] = [];

  /** `store`: where the API's boards are kept (none: the config file's only); load() reads them. */
  constructor(boards: readonly BoardConfig[], store?: Store) {
    this.store = store;
    for (const board of boards) this.byKey.set(boardKey(board.device), { board, source: "config" });
  }

  /** Adds the boards set through the API; a config file's board of the same device wins. */
  async load(): Promise<void> {
    const rows = (await this.store?.query.selectFrom("lab_boards").select("config").orderBy("key").execute()) ?? [];
    for (const row of rows) {
      // Stored as the API checked it; a row this version no longer reads is left out, not fatal.
      try {
        const board = readBoard(JSON.parse(row.config));
        if (!this.byKey.has(boardKey(board.device))) this.byKey.set(boardKey(board.device), { board, source: "api" });
      } catch {
        continue;
      }
    }
  }

  onChange(change: BoardChange): void {
    this.changes.push(change);
  }

  list(): BoardEntry[] {
    return [...this.byKey.values()];
  }

  /** Sets a board through the API (svc_admin_rw, checked by the caller); a config file's board is a 409. */
  async set(board: BoardConfig, actor: Actor): Promise<BoardEntry> {
    const key = boardKey(board.device);
    const before = this.byKey.get(key);
    if (before?.source === "config") throw new LabgateError("conflict", `board ${board.device} is set in the config file (lab.boards); change it there`);
    await this.store!.transact(async (tx) => {
      const row = { config: JSON.stringify(board), updated: isoTime(actor.at), actor: actor.name };
      await tx
        .insertInto("lab_boards")
        .values({ key, ...row })
        .onConflict((oc) => oc.column("key").doUpdateSet(row))
        .execute();
      await recordAudit(tx, actor, "board.set", `board:${key}`, { power: board.power?.driver ?? null, serial: board.serial ? ("tcp" in board.serial ? "tcp" : "tty") : null });
    });
    const entry: BoardEntry = { board, source: "api" };
    this.byKey.set(key, entry);
    for (const change of this.changes) change(before?.board, board);
    return entry;
  }

  /** Removes a board set through the API; a config file's board is a 409, an unknown one a 404. */
  async remove(device: string, actor: Actor): Promise<void> {
    const key = boardKey(device);
    const before = this.byKey.get(key);
    if (!before) throw new LabgateError("not_found", `no board ${device}`);
    if (before.source === "config") throw new LabgateError("conflict", `board ${device} is set in the config file (lab.boards); change it there`);
    await this.store!.transact(async (tx) => {
      await tx.deleteFrom("lab_boards").where("key", "=", key).execute();
      await recordAudit(tx, actor, "board.delete", `board:${key}`);
    });
    this.byKey.delete(key);
    for (const change of this.changes) change(before.board, undefined);
  }

  /** The board of `device`: by its MAC address first, then by its name. */
  of(device: BoardDevice): BoardConfig | undefined {
    return (this.byKey.get(device.mac_address.toLowerCase()) ?? (device.name ? this.byKey.get(device.name) : undefined))?.board;
  }

  get size(): number {
    return this.byKey.size;
  }
}
