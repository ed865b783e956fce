import { closeSync, openSync, readSync } from "node:fs";

/** The executable's assets (build/sea-config.mjs): each read gives a copy of the asset's bytes. */
export interface SeaAssets {
  getAsset(key: string): ArrayBuffer;
  getAsset(key: string, encoding: "utf8"): string;
}

/** What labgate uses of node:sea, Node's single-executable API (present from Node 20.16). */
interface NodeSea extends SeaAssets {
  isSea(): boolean;
  /** The asset's bytes inside the executable's mapping, without a copy (read-only). */
  getRawAsset(key: string): ArrayBuffer;
}

let assets: SeaAssets | undefined;

/**
 * The executable's assets when this process is the single executable, else undefined.
 *
 * Read from the executable's file (pread) rather than through node:sea: node:sea copies them out
 * of the executable's mapping, and every page so read stays in the process's RSS for good (the
 * program's bundle, its code cache and the wasm: 4.4 MB of a server's idle RSS, though the kernel
 * could drop those clean pages). Read from the file, the pages stay in the page cache, outside the
 * process. Where the blob is not understood, node:sea as before (and a line says so).
 */
export function seaAssets(): SeaAssets | undefined {
  if (assets) return assets;
  const sea = process.getBuiltinModule?.("node:sea") as NodeSea | undefined;
  if (!sea?.isSea()) return undefined;
  assets = assetsFromFile(sea) ?? sea;
  return assets;
}

/** An asset's place in the executable's file. */
interface Place {
  offset: number;
  length: number;
}

function assetsFromFile(sea: NodeSea): SeaAssets | undefined {
  let fd: number | undefined;
  let index: Map<string, Place>;
  try {
    // The running executable's inode, open for the process's life: a package upgrade that
    // replaces the file at its path changes nothing read here.
    fd = openSync("/proc/self/exe", "r");
    const file = fd;
    index = readSeaIndex((position, length) => {
      const buffer = Buffer.allocUnsafeSlow(length);
      if (readSync(file, buffer, 0, length, position) !== length) throw new Error("the executable ended early");
      return buffer;
    });
  } catch (error) {
    if (fd !== undefined) closeSync(fd);
    process.stderr.write(`labgate: the executable's assets are read through node:sea (${(error as Error).message})\n`);
    return undefined;
  }
  const file = fd;
  function getAsset(key: string): ArrayBuffer;
  function getAsset(key: string, encoding: "utf8"): string;
  function getAsset(key: string, encoding?: "utf8"): ArrayBuffer | string {
    const place = index.get(key);
    const bytes = place && readPlace(key, place);
    if (!bytes) return encoding ? sea.getAsset(key, encoding) : sea.getAsset(key);
    return encoding ? bytes.toString(encoding) : (bytes.buffer as ArrayBuffer);
  }
  /** The asset read from the file (its own ArrayBuffer), checked against its length and first bytes through the mapping (one page). */
  function readPlace(key: string, place: Place): Buffer | undefined {
    const bytes = Buffer.allocUnsafeSlow(place.length);
    const read = readSync(file, bytes, 0, place.length, place.offset);
    const raw = sea.getRawAsset(key);
    const head = Math.min(16, place.length);
    if (read === place.length && raw.byteLength === place.length && bytes.subarray(0, head).equals(new Uint8Array(raw, 0, head))) return bytes;
    process.stderr.write(`labgate: the executable's asset ${key} is read through node:sea (the file gave other bytes at ${place.offset})\n`);
    return undefined;
  }
  return { getAsset };
}

const PT_NOTE = 4;
const SEA_NOTE = "NODE_SEA_BLOB";
const SEA_MAGIC = 0x143da20;
/** Node's SeaFlags (src/node_sea.h): what the blob holds after the main script. */
const USE_SNAPSHOT = 1 << 1;
const USE_CODE_CACHE = 1 << 2;
const INCLUDE_ASSETS = 1 << 3;

/**
 * Where each asset lies in the executable: the ELF note NODE_SEA_BLOB (postject's), and in it
 * Node 24's serialized SeaResource: magic, flags, the exec-argv extension byte, the code path,
 * the main script, its code cache, then the assets as length-prefixed key and value. Throws on
 * anything else (another format, a 32-bit or big-endian ELF, a length beyond the blob).
 */
export function readSeaIndex(read: (position: number, length: number) => Buffer): Map<string, Place> {
  const elf = read(0, 64);
  if (elf.readUInt32BE(0) !== 0x7f454c46 || elf[4] !== 2 || elf[5] !== 1) throw new Error("not a 64-bit little-endian ELF file");
  const phoff = Number(elf.readBigUInt64LE(32));
  const phentsize = elf.readUInt16LE(54);
  const headers = read(phoff, phentsize * elf.readUInt16LE(56));
  for (let at = 0; at < headers.length; at += phentsize) {
    if (headers.readUInt32LE(at) !== PT_NOTE) continue;
    const start = Number(headers.readBigUInt64LE(at + 8));
    const end = start + Number(headers.readBigUInt64LE(at + 32));
    const align = Number(headers.readBigUInt64LE(at + 48)) === 8 ? 8 : 4;
    const pad = (n: number) => Math.ceil(n / align) * align;
    for (let note = start; note + 12 <= end; ) {
      const head = read(note, 12);
      const nameSize = head.readUInt32LE(0);
      const descSize = head.readUInt32LE(4);
      const desc = note + 12 + pad(nameSize);
      if (read(note + 12, nameSize).toString("latin1").replace(/\0+$/, "") === SEA_NOTE) return readAssets(read, desc, desc + descSize);
      note = desc + pad(descSize);
    }
  }
  throw new Error(`no ${SEA_NOTE} note`);
}

function readAssets(read: (position: number, length: number) => Buffer, start: number, end: number): Map<string, Place> {
  let at = start;
  const take = (length: number) => {
    if (length < 0 || at + length > end) throw new Error("a length beyond the blob");
    const here = at;
    at += length;
    return here;
  };
  const size = () => Number(read(take(8), 8).readBigUInt64LE(0));
  const skip = () => take(size());
  const head = read(take(9), 9);
  if (head.readUInt32LE(0) !== SEA_MAGIC) throw new Error("an unknown single-executable blob");
  const flags = head.readUInt32LE(4);
  skip(); // the code path
  skip(); // the main script
  if (flags & USE_CODE_CACHE && !(flags & USE_SNAPSHOT)) skip();
  const index = new Map<string, Place>();
  if (!(flags & INCLUDE_ASSETS)) return index;
  for (let count = size(); count > 0; count--) {
    const keyLength = size();
    const key = read(take(keyLength), keyLength).toString("utf8");
    const length = size();
    index.set(key, { offset: take(length), length });
  }
  return index;
}
