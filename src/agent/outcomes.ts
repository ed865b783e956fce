/*
 * Update outcomes the agent owes the server (`update_outcome`, src/protocol/labgate/device.ts):
 * kept in `outcomes.json` in the data dir until the server acknowledges each one, so that a report
 * made while the gateway is unreachable, or before a restart, reaches it on a later connection.
 */
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { writeFileDurable } from "../util/files.ts";
import { OUTPUT_TAIL, type DeviceMessage, type UpdateOutcome as UpdateOutcomeMessage } from "../protocol/labgate/device.ts";

/** What became of an update: the message without its method and id. */
export type UpdateOutcome = Omit<UpdateOutcomeMessage, "method" | "id">;
type Entry = UpdateOutcome & { id: string };

const FILE = "outcomes.json";
/** Reports kept at most (the oldest go: a device long offline keeps its latest story). */
const LIMIT = 100;

/** The last OUTPUT_TAIL bytes of a command's output, as text. */
export const outputTail = (output: Buffer): string => output.subarray(Math.max(0, output.length - OUTPUT_TAIL)).toString("utf8");

export class OutcomeQueue {
  private readonly path: string;
  private pending: Entry[];
  private readonly send: (message: DeviceMessage) => boolean;

  /** `send` sends now and says whether it could (the socket is open). */
  constructor(dataDir: string, send: (message: DeviceMessage) => boolean) {
    this.path = join(dataDir, FILE);
    this.send = send;
    this.pending = this.read();
  }

  /** Reports one outcome: on disk first, then sent if connected (else on the next connection). */
  report(outcome: UpdateOutcome): void {
    const entry = { id: randomUUID(), ...outcome };
    this.pending.push(entry);
    if (this.pending.length > LIMIT) this.pending.splice(0, this.pending.length - LIMIT);
    this.persist();
    this.send({ method: "update_outcome", ...entry });
  }

  /** The server has it on disk. */
  acknowledged(id: string): void {
    const before = this.pending.length;
    this.pending = this.pending.filter((entry) => entry.id !== id);
    if (this.pending.length !== before) this.persist();
  }

  /** A new connection: everything not acknowledged goes again, in order. */
  resend(): void {
    for (const entry of this.pending) if (!this.send({ method: "update_outcome", ...entry })) return;
  }

  get size(): number {
    return this.pending.length;
  }

  private read(): Entry[] {
    try {
      const list = JSON.parse(readFileSync(this.path, "utf8")) as unknown;
      return Array.isArray(list) ? list.filter((e) => e && typeof e === "object" && typeof e.id === "string") : [];
    } catch {
      return [];
    }
  }

  private persist(): void {
    writeFileDurable(this.path, JSON.stringify(this.pending) + "\n", 0o600);
  }
}
