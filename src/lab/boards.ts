/*
 * The board map: which managed device is which board of `lab.boards`. A board names its device
 * by MAC address or by name, so a renamed device may stop (or start) being a board: the map is
 * asked with the device as it is now.
 */
import { boardKey, type BoardConfig } from "./config.ts";

export interface BoardDevice {
  mac_address: string;
  name: string;
}

export class BoardMap {
  private readonly byKey = new Map<string, BoardConfig>();

  constructor(boards: readonly BoardConfig[]) {
    for (const board of boards) this.byKey.set(boardKey(board.device), board);
  }

  /** The board of `device`: by its MAC address first, then by its name. */
  of(device: BoardDevice): BoardConfig | undefined {
    return this.byKey.get(device.mac_address.toLowerCase()) ?? (device.name ? this.byKey.get(device.name) : undefined);
  }

  get size(): number {
    return this.byKey.size;
  }
}
