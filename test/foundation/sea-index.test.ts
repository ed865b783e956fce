/**
 * Where the single executable's assets lie in its file (src/util/sea.ts): read with pread so that
 * their pages stay out of the process's RSS. The format is checked here on a file laid out as
 * postject and Node 24 lay it out; the executable's own blob by scripts/smoke-executable.sh (a
 * line on stderr when the executable falls back to node:sea, which it greps for).
 */
import assert from "node:assert/strict";
import { closeSync, openSync, readSync } from "node:fs";
import { test } from "node:test";
import { readSeaIndex } from "../../src/util/sea.ts";

const u32 = (n: number) => Buffer.from(new Uint32Array([n]).buffer);
const u64 = (n: number) => Buffer.from(new BigUint64Array([BigInt(n)]).buffer);
const field = (bytes: string | Buffer) => Buffer.concat([u64(Buffer.byteLength(bytes)), Buffer.from(bytes)]);
const padded = (b: Buffer, align = 4) => Buffer.concat([b, Buffer.alloc((align - (b.length % align)) % align)]);
const note = (name: string, desc: Buffer, type = 0) => Buffer.concat([u32(name.length + 1), u32(desc.length), u32(type), padded(Buffer.from(`${name}\0`)), padded(desc)]);

/** Node 24's SeaResource: magic, flags, exec-argv extension, code path, main script, code cache, assets. */
function blob(assets: Record<string, string>, flags = 0b11101, magic = 0x143da20): Buffer {
  const entries = Object.entries(assets).flatMap(([key, value]) => [field(key), field(value)]);
  return Buffer.concat([u32(magic), u32(flags), Buffer.from([1]), field("dist/sea/labgate.cjs"), field("main();"), field("CACHE"), u64(Object.keys(assets).length), ...entries]);
}

/** A 64-bit little-endian ELF file whose second program header is a PT_NOTE with a GNU note, then `notes`. */
function elf(notes: Buffer, elfClass = 2): Buffer {
  const header = Buffer.alloc(64);
  Buffer.from([0x7f, 0x45, 0x4c, 0x46, elfClass, 1]).copy(header);
  header.writeBigUInt64LE(64n, 32); // program headers right after
  header.writeUInt16LE(56, 54);
  header.writeUInt16LE(2, 56);
  const segment = Buffer.concat([note("GNU", Buffer.alloc(16), 3), notes]);
  const at = 64 + 2 * 56 + 8; // a few bytes of gap before the segment
  const load = Buffer.alloc(56);
  load.writeUInt32LE(1, 0);
  const pt = Buffer.alloc(56);
  pt.writeUInt32LE(4, 0);
  pt.writeBigUInt64LE(BigInt(at), 8);
  pt.writeBigUInt64LE(BigInt(segment.length), 32);
  pt.writeBigUInt64LE(4n, 48);
  return Buffer.concat([header, load, pt, Buffer.alloc(8), segment]);
}

const reader = (file: Buffer) => (position: number, length: number) => {
  assert.ok(position + length <= file.length, `a read beyond the file: ${position}+${length}`);
  return file.subarray(position, position + length);
};

test("finds each asset of the blob in the file: its offset and length give its bytes", () => {
  const assets = { "labgate-main.cjs": "the program", "sql-wasm.wasm": "\0asm\u0001", "console/index.html": "<!doctype html>" };
  const file = elf(note("NODE_SEA_BLOB", blob(assets)));
  const index = readSeaIndex(reader(file));
  assert.deepEqual([...index.keys()], Object.keys(assets));
  for (const [key, value] of Object.entries(assets)) {
    const { offset, length } = index.get(key)!;
    assert.equal(file.subarray(offset, offset + length).toString(), value, key);
  }
});

test("a blob without a code cache (flags say so) or without assets", () => {
  const noCache = Buffer.concat([u32(0x143da20), u32(0b01001), Buffer.from([0]), field("p"), field("main();"), u64(1), field("a"), field("bytes")]);
  const file = elf(note("NODE_SEA_BLOB", noCache));
  const { offset, length } = readSeaIndex(reader(file)).get("a")!;
  assert.equal(file.subarray(offset, offset + length).toString(), "bytes");
  assert.equal(readSeaIndex(reader(elf(note("NODE_SEA_BLOB", blob({}, 0b00101))))).size, 0);
});

test("anything else is refused, never misread: another ELF class, no blob, another magic, a length beyond the blob", () => {
  assert.throws(() => readSeaIndex(reader(elf(note("NODE_SEA_BLOB", blob({ a: "b" })), 1))), /not a 64-bit little-endian ELF/);
  assert.throws(() => readSeaIndex(reader(elf(note("OTHER", blob({ a: "b" }))))), /no NODE_SEA_BLOB note/);
  assert.throws(() => readSeaIndex(reader(elf(note("NODE_SEA_BLOB", blob({ a: "b" }, 0b11101, 0x1234))))), /unknown single-executable blob/);
  const whole = blob({ a: "bytes" });
  assert.throws(() => readSeaIndex(reader(elf(note("NODE_SEA_BLOB", whole.subarray(0, whole.length - 2))))), /a length beyond the blob/);
});

test("a real ELF file without a blob (this Node) is walked note by note and refused", () => {
  const fd = openSync(process.execPath, "r");
  try {
    const read = (position: number, length: number) => {
      const buffer = Buffer.alloc(length);
      readSync(fd, buffer, 0, length, position);
      return buffer;
    };
    assert.throws(() => readSeaIndex(read), /no NODE_SEA_BLOB note/);
  } finally {
    closeSync(fd);
  }
});
