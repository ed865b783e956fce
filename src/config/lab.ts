/*
 * The `lab` section of the server's config: the board map (which managed device has which power
 * port and console port) and the console capture's bound. Every power driver has its own keys;
 * an unknown driver or key is refused at start, naming it, like every key of the config.
 */
import * as z from "zod";
import { argv, boolean, custom, integer, Problem, section, shown, string } from "./schema.ts";

/** The power drivers and the keys each takes besides `driver` (docs/lab.md). */
export const POWER_DRIVERS = ["pdudaemon", "command", "tasmota", "shelly", "gpio", "uhubctl"] as const;
export type PowerDriverName = (typeof POWER_DRIVERS)[number];

function httpUrl(value: unknown): string {
  if (typeof value !== "string") throw new Problem(`expected an http(s) URL, got ${shown(value)}`);
  try {
    const parsed = new URL(value);
    if (parsed.protocol === "http:" || parsed.protocol === "https:") return value.replace(/\/+$/, "");
  } catch {
    // falls through to the message
  }
  throw new Problem(`expected an http(s) URL, got ${shown(value)}`);
}
const url = () => custom(httpUrl);
/** Seconds a driver's request or command may take. */
const timeout = () => integer(1, 600).prefault(30);
/** Seconds between off and on in a cycle (drivers that have no cycle of their own). */
const delay = () => integer(0, 600).prefault(5);
const nonEmptyArgv = () =>
  argv().refine((command) => command.length > 0, { error: "expected a non-empty list of strings (argv, no shell)" });

const DRIVER_SCHEMAS = {
  /** The LAVA project's PDU daemon: labgate sends its HTTP requests with the PDU's hostname and port. */
  pdudaemon: z.strictObject({ driver: z.literal("pdudaemon"), url: url(), hostname: string().min(1), port: integer(0, 65535), delay: delay(), timeout: timeout() }),
  /** Command lines run as the test user; without `cycle`: off, delay, on. */
  command: z.strictObject({ driver: z.literal("command"), on: nonEmptyArgv(), off: nonEmptyArgv(), cycle: nonEmptyArgv().optional(), delay: delay(), timeout: timeout() }),
  /** Tasmota's HTTP command API (`/cm?cmnd=Power1 On`). */
  tasmota: z.strictObject({
    driver: z.literal("tasmota"),
    url: url(),
    relay: integer(1, 32).prefault(1),
    user: string().optional(),
    password: string().optional(),
    delay: delay(),
    timeout: timeout(),
  }),
  /** Shelly Gen1's relay API (`/relay/0?turn=on`). */
  shelly: z.strictObject({ driver: z.literal("shelly"), url: url(), relay: integer(0, 15).prefault(0), delay: delay(), timeout: timeout() }),
  /** libgpiod's `gpioset` (v1 syntax: `gpioset [-l] CHIP LINE=VALUE`). */
  gpio: z.strictObject({
    driver: z.literal("gpio"),
    chip: string().min(1),
    line: integer(0, 65535),
    active_low: boolean().prefault(false),
    program: string().min(1).prefault("gpioset"),
    delay: delay(),
    timeout: timeout(),
  }),
  /** USB port power through `uhubctl -l LOCATION -p PORT -a on|off|cycle`. */
  uhubctl: z.strictObject({
    driver: z.literal("uhubctl"),
    location: string().min(1),
    port: integer(1, 255),
    program: string().min(1).prefault("uhubctl"),
    delay: delay(),
    timeout: timeout(),
  }),
} satisfies Record<PowerDriverName, z.ZodType>;

export type PowerConfig = { [K in PowerDriverName]: z.output<(typeof DRIVER_SCHEMAS)[K]> }[PowerDriverName];

/** `power`: the driver named first (an unknown one is refused naming `driver`), then that driver's keys. */
function readPower(value: unknown): PowerConfig {
  if (value === null || typeof value !== "object" || Array.isArray(value)) throw new Problem("expected a mapping with a driver and its keys");
  const driver = (value as { driver?: unknown }).driver;
  if (typeof driver !== "string" || !(POWER_DRIVERS as readonly string[]).includes(driver)) {
    throw new Problem(`expected one of ${POWER_DRIVERS.join(", ")}, got ${shown(driver)}`, ["driver"]);
  }
  const result = DRIVER_SCHEMAS[driver as PowerDriverName].safeParse(value);
  if (result.success) return result.data as PowerConfig;
  const unknownKey = result.error.issues.find((i) => i.code === "unrecognized_keys");
  if (unknownKey) throw new Problem(`unknown key for driver ${driver}`, [...(unknownKey.path as Array<string | number>), unknownKey.keys[0]!]);
  const issue = result.error.issues[0]!;
  throw new Problem(issue.message, issue.path as Array<string | number>);
}

/** `host:port` of a TCP console (ser2net). */
function readTcp(value: unknown): string {
  if (typeof value === "string") {
    const match = /^(?:\[[0-9a-fA-F:.]+\]|[^:\s[\]]+):(\d{1,5})$/.exec(value);
    if (match && Number(match[1]) >= 1 && Number(match[1]) <= 65535) return value;
  }
  throw new Problem(`expected HOST:PORT, got ${shown(value)}`);
}

const SerialConfig = z.union(
  [z.strictObject({ port: string().min(1), baud: integer(50, 4_000_000).prefault(115200) }), z.strictObject({ tcp: custom(readTcp) })],
  { error: 'expected {port: /dev/ttyUSB0, baud: 115200} or {tcp: "host:port"}' },
);
export type SerialConfig = z.output<typeof SerialConfig>;

export const BoardConfig = z.strictObject({
  /** A MAC address or a device name. */
  device: string().min(1),
  power: custom(readPower).optional(),
  serial: SerialConfig.optional(),
});
export type BoardConfig = z.output<typeof BoardConfig>;

const MAC = /^[0-9a-f]{2}(?::[0-9a-f]{2}){5}$/i;
/** How a board's `device` is compared: MAC addresses in lower case, names as written. */
export const boardKey = (device: string) => (MAC.test(device) ? device.toLowerCase() : device);

/** One board as the config file or the API gives it; a Problem names the key that does not fit. */
export function readBoard(entry: unknown): BoardConfig {
  const result = BoardConfig.safeParse(entry);
  if (result.success) return result.data;
  const unknownKey = result.error.issues.find((issue) => issue.code === "unrecognized_keys");
  if (unknownKey) throw new Problem("unknown key", [...(unknownKey.path as Array<string | number>), unknownKey.keys[0]!]);
  const issue = result.error.issues[0]!;
  throw new Problem(issue.message, issue.path as Array<string | number>);
}

function readBoards(value: unknown): BoardConfig[] {
  if (!Array.isArray(value)) throw new Problem("expected a list of boards ({device, power, serial})");
  const seen = new Map<string, number>();
  return value.map((entry, i) => {
    let board: BoardConfig;
    try {
      board = readBoard(entry);
    } catch (error) {
      throw error instanceof Problem ? new Problem(error.what, [i, ...error.path]) : error;
    }
    const key = boardKey(board.device);
    const earlier = seen.get(key);
    if (earlier !== undefined) throw new Problem(`${shown(board.device)} is already board ${earlier}`, [i, "device"]);
    seen.set(key, i);
    return board;
  });
}

export const labSection = section({
  boards: custom(readBoards).prefault([]),
  /** Bytes of console output kept per board (a ring on disk). */
  console_bytes: integer(4096, 1024 * 1048576).prefault(1048576),
  /** Seconds of console kept in a deployment attempt's span after its outcome (the boot after an install). */
  console_after_outcome: integer(0, 3600).prefault(60),
});
export type LabConfig = z.output<typeof labSection>;
