/*
 * Board consoles: each board's `serial` port (a local tty or a TCP port such as ser2net's) is
 * read continuously into a bounded ring on disk (`lab.console_bytes` per board, two segment files
 * of half that), addressed by byte offsets that keep counting across restarts. A port that is
 * missing, refuses or goes away is tried again every few seconds; meanwhile its status says why,
 * and the other boards go on.
 */
import { createHash } from "node:crypto";
import { closeSync, existsSync, fstatSync, mkdirSync, openSync, readdirSync, readSync, rmSync, writeSync, constants } from "node:fs";
import { connect, type Socket } from "node:net";
import { join } from "node:path";
import { ReadStream } from "node:tty";
import type { AppContext, Identity } from "../app/context.ts";
import { getDevice } from "../update/devices/devices.ts";
import { allowed, authorize } from "../update/permissions/permissions.ts";
import { LabgateError } from "../util/errors.ts";
import { runProcess } from "../util/process.ts";
import { after } from "../util/time.ts";
import type { BoardMap } from "./boards.ts";
import { boardKey, type BoardConfig, type SerialConfig } from "../config/lab.ts";

/** How long a port that failed waits before it is opened again. */
export const RETRY_MS = 2000;

/** One board's captured output: segment files named by the offset of their first byte. */
export class ConsoleRing {
  private readonly dir: string;
  private readonly segmentBytes: number;
  private fd: number | undefined;
  private segStart = 0;
  private segSize = 0;

  constructor(dir: string, bytes: number) {
    this.dir = dir;
    this.segmentBytes = Math.max(1, Math.floor(bytes / 2));
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const last = this.segments().at(-1);
    if (last !== undefined) {
      this.segStart = last;
      this.fd = openSync(this.path(last), "a");
      this.segSize = fstatSync(this.fd).size;
    }
  }

  private path(start: number): string {
    return join(this.dir, String(start).padStart(16, "0"));
  }

  private segments(): number[] {
    return readdirSync(this.dir)
      .filter((name) => /^\d{16}$/.test(name))
      .map(Number)
      .sort((a, b) => a - b);
  }

  /** The offset after the last byte kept. */
  get end(): number {
    return this.segStart + this.segSize;
  }

  /** The offset of the oldest byte kept. */
  get start(): number {
    return this.segments()[0] ?? this.end;
  }

  append(chunk: Buffer): void {
    let rest = chunk;
    while (rest.length > 0) {
      if (this.fd === undefined || this.segSize >= this.segmentBytes) this.rotate();
      const part = rest.subarray(0, this.segmentBytes - this.segSize);
      writeSync(this.fd!, part);
      this.segSize += part.length;
      rest = rest.subarray(part.length);
    }
  }

  /** A new segment at the end; only the one before it stays. */
  private rotate(): void {
    if (this.fd !== undefined) closeSync(this.fd);
    this.segStart = this.end;
    this.segSize = 0;
    this.fd = openSync(this.path(this.segStart), "a");
    for (const start of this.segments().slice(0, -2)) rmSync(this.path(start), { force: true });
  }

  /** The bytes kept from `from` (at the earliest the oldest kept) to `to` (at the latest the end). */
  read(from: number, to = this.end): { start: number; end: number; bytes: Buffer } {
    const segments = this.segments();
    const start = Math.max(from, segments[0] ?? this.end);
    const end = Math.min(Math.max(to, start), this.end);
    const parts: Buffer[] = [];
    segments.forEach((seg, i) => {
      const segEnd = i + 1 < segments.length ? segments[i + 1]! : this.end;
      const a = Math.max(start, seg);
      const b = Math.min(end, segEnd);
      if (b <= a) return;
      const buffer = Buffer.alloc(b - a);
      const fd = openSync(this.path(seg), "r");
      try {
        readSync(fd, buffer, 0, buffer.length, a - seg);
      } finally {
        closeSync(fd);
      }
      parts.push(buffer);
    });
    return { start, end, bytes: Buffer.concat(parts) };
  }

  close(): void {
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
  }
}

/** Reads one board's port into its ring, opening it again after every failure until closed. */
class Capture {
  readonly ring: ConsoleRing;
  /** `connected`, or why the port is not read now. */
  status = "starting";
  private readonly serial: SerialConfig;
  private readonly ctx: AppContext;
  private source: ReadStream | Socket | undefined;
  /** A local tty opened for writing (the live view's input), while it is connected. */
  private writeFd: number | undefined;
  private cancelRetry: (() => void) | undefined;
  private closed = false;
  /** The live views following this console. */
  readonly watchers = new Set<(chunk: Buffer) => void>();

  constructor(ctx: AppContext, serial: SerialConfig, ring: ConsoleRing) {
    this.ctx = ctx;
    this.serial = serial;
    this.ring = ring;
  }

  start(): void {
    void this.open().catch((error: Error) => this.failed(error.message));
  }

  private async open(): Promise<void> {
    if (this.closed) return;
    if ("tcp" in this.serial) {
      const at = this.serial.tcp.lastIndexOf(":");
      const host = this.serial.tcp.slice(0, at).replace(/^\[|\]$/g, "");
      const socket = connect({ host, port: Number(this.serial.tcp.slice(at + 1)) });
      socket.once("connect", () => (this.status = "connected"));
      this.attach(socket, `${this.serial.tcp}`);
      return;
    }
    const { port, baud } = this.serial;
    if (!existsSync(port)) return this.failed(`${port} does not exist`);
    const stty = await runProcess({ command: ["stty", "-F", port, String(baud), "raw", "-echo"], cwd: "/", timeoutMs: 10_000, clock: this.ctx.clock });
    if (stty.exitCode !== 0) return this.failed(`stty on ${port} failed: ${(stty.startError ?? stty.stderr.trim()) || `exit ${stty.exitCode}`}`);
    if (this.closed) return;
    const fd = openSync(port, constants.O_RDONLY | constants.O_NOCTTY | constants.O_NONBLOCK);
    const stream = new ReadStream(fd);
    this.status = "connected";
    this.attach(stream, port);
  }

  private attach(source: ReadStream | Socket, what: string): void {
    this.source = source;
    source.on("data", (chunk: Buffer) => {
      try {
        this.ring.append(chunk);
      } catch (error) {
        this.ctx.log.warn(`lab: console of ${what} not stored: ${(error as Error).message}`);
      }
      for (const watcher of this.watchers) watcher(chunk);
    });
    source.once("error", (error: NodeJS.ErrnoException) => this.failed(`${what}: ${error.code ?? error.message}`));
    source.once("close", () => this.failed(`${what} closed`));
  }

  private failed(why: string): void {
    if (this.closed || this.cancelRetry) return;
    if (this.status !== why) this.ctx.log.warn(`lab: console ${why}; opening it again every ${RETRY_MS / 1000} s`);
    this.status = why;
    this.source?.destroy();
    this.source = undefined;
    this.closeWriter();
    this.cancelRetry = after(this.ctx.clock, RETRY_MS, () => {
      this.cancelRetry = undefined;
      this.start();
    });
  }

  /** Writes to the board's console port; throws why it cannot (the port is not connected, or refused the bytes). */
  write(bytes: Buffer): void {
    if (this.status !== "connected" || !this.source) throw new LabgateError("conflict", `the console port is not connected: ${this.status}`);
    // A tty's ReadStream is a net.Socket too, opened read-only: only ser2net's socket is written to.
    if ("tcp" in this.serial) return void (this.source as Socket).write(bytes);
    const { port } = this.serial;
    this.writeFd ??= openSync(port, constants.O_WRONLY | constants.O_NOCTTY | constants.O_NONBLOCK);
    writeSync(this.writeFd, bytes);
  }

  private closeWriter(): void {
    if (this.writeFd !== undefined) closeSync(this.writeFd);
    this.writeFd = undefined;
  }

  close(): void {
    this.closed = true;
    this.cancelRetry?.();
    this.source?.destroy();
    this.closeWriter();
    this.ring.close();
  }
}

export interface ConsoleView {
  start: number;
  end: number;
  status: string;
  bytes: Buffer;
}

/** A live view of one board's console (ConsoleService.live). */
export interface LiveConsole {
  /** The caller held `shell` on the device when it was opened. */
  writable: boolean;
  /** Hands what the board prints from now on to `onData`; returns how to stop. */
  follow(onData: (chunk: Buffer) => void): () => void;
  /** Writes to the port; throws why it cannot. */
  write(bytes: Buffer): void;
}

export class ConsoleService {
  private readonly ctx: AppContext;
  private readonly boards: BoardMap;
  private readonly captures = new Map<BoardConfig, Capture>();

  constructor(ctx: AppContext, boards: BoardMap) {
    this.ctx = ctx;
    this.boards = boards;
    for (const { board } of boards.list()) this.add(board);
    // A board set or removed through the API: its old port is closed, its new one opened.
    boards.onChange((before, after) => {
      if (before) {
        this.captures.get(before)?.close();
        this.captures.delete(before);
      }
      if (after) this.add(after)?.start();
    });
  }

  /** The capture of `board`'s console port, when it has one; its ring is kept by the board's device. */
  private add(board: BoardConfig): Capture | undefined {
    if (!board.serial) return undefined;
    const dir = join(this.ctx.dataDir, "lab", "console", createHash("sha256").update(boardKey(board.device)).digest("hex").slice(0, 20));
    const capture = new Capture(this.ctx, board.serial, new ConsoleRing(dir, this.ctx.config.lab.console_bytes));
    this.captures.set(board, capture);
    return capture;
  }

  start(): void {
    for (const capture of this.captures.values()) capture.start();
  }

  /** Whether any board has a console port (a deployment's offers look for spans only then). */
  get any(): boolean {
    return this.captures.size > 0;
  }

  close(): void {
    for (const capture of this.captures.values()) capture.close();
  }

  /** The capture of a device's board, if it has a console port. */
  private captureOf(device: { mac_address: string; name: string }): Capture | undefined {
    const board = this.boards.of(device);
    return board && this.captures.get(board);
  }

  /** A board's console from byte offset `since` (`read` on the device); 409 without a console port. */
  async read(identity: Identity, id: number, since: number): Promise<ConsoleView> {
    const capture = await this.readableCapture(identity, id);
    return { ...capture.ring.read(since), status: capture.status };
  }

  /**
   * The live view of a device's console (`read` on the device; 409 without a console port):
   * `follow` hands on what the board prints from then on until its stop is called; `write` is
   * allowed when the caller holds `shell` on the device.
   */
  async live(identity: Identity, id: number): Promise<LiveConsole> {
    const capture = await this.readableCapture(identity, id);
    return {
      writable: await allowed(this.ctx.store.query, identity, "device", id, "shell"),
      follow: (onData) => {
        capture.watchers.add(onData);
        return () => void capture.watchers.delete(onData);
      },
      write: (bytes) => capture.write(bytes),
    };
  }

  /** Whether `identity` (as it stands now) may go on following the console of device `id`: a reason to stop, or undefined. */
  async mayFollow(identity: Identity, id: number, writing: boolean): Promise<string | undefined> {
    if (!(await allowed(this.ctx.store.query, identity, "device", id, "read"))) return "the device is no longer readable";
    if (writing && !(await allowed(this.ctx.store.query, identity, "device", id, "shell"))) return "writing to this console needs the shell permission on the device";
    return undefined;
  }

  private async readableCapture(identity: Identity, id: number): Promise<Capture> {
    await authorize(this.ctx.store.query, identity, "device", id, "read");
    const device = (await getDevice(this.ctx.store.query, id));
    if (!device) throw new LabgateError("not_found", "device does not exist");
    const capture = this.captureOf(device);
    if (!capture) throw new LabgateError("conflict", `device ${device.name || device.mac_address} has no console port in lab.boards`);
    return capture;
  }

  /** Where a device's console is now (undefined: it has none): the start of a span for `span`. */
  offsetOf(device: { mac_address: string; name: string }): number | undefined {
    return this.captureOf(device)?.ring.end;
  }

  /** What a device's console printed since `from` (an offset from offsetOf). */
  span(device: { mac_address: string; name: string }, from: number): Buffer | undefined {
    return this.captureOf(device)?.ring.read(from).bytes;
  }
}
