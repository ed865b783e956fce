import { existsSync, linkSync, mkdirSync, readFileSync, unlinkSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import nacl from "tweetnacl";
import { writeFileDurable } from "../util/files.ts";

export interface AppKeys {
  /** Signs management tokens (Ed25519, tweetnacl). */
  ed25519: { publicKey: Uint8Array; secretKey: Uint8Array };
  /** Signs device tokens and download links (HMAC-SHA-256). */
  hmacSecret: Buffer;
}

export const KEYS_DIR = "keys";
const ED25519_FILE = "mgmt-ed25519.key";
const HMAC_FILE = "hmac.secret";

/**
 * Reads a key file, creating it first when missing. The file appears atomically (written
 * elsewhere, then hard-linked), so a server and `token issue` starting together agree on one key.
 */
function loadOrCreate(path: string, make: () => Buffer): Buffer {
  if (!existsSync(path)) {
    const tmp = `${path}.${process.pid}.new`;
    writeFileDurable(tmp, make().toString("base64") + "\n");
    try {
      linkSync(tmp, path);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    } finally {
      unlinkSync(tmp);
    }
  }
  return Buffer.from(readFileSync(path, "utf8").trim(), "base64");
}

export function loadOrCreateKeys(dataDir: string): AppKeys {
  const dir = join(dataDir, KEYS_DIR);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const seedOrSecret = loadOrCreate(join(dir, ED25519_FILE), () => Buffer.from(nacl.sign.keyPair().secretKey));
  if (seedOrSecret.length !== nacl.sign.secretKeyLength) throw new Error(`${join(dir, ED25519_FILE)} does not hold an Ed25519 secret key`);
  const pair = nacl.sign.keyPair.fromSecretKey(new Uint8Array(seedOrSecret));
  const hmacSecret = loadOrCreate(join(dir, HMAC_FILE), () => randomBytes(32));
  if (hmacSecret.length !== 32) throw new Error(`${join(dir, HMAC_FILE)} does not hold a 32-byte secret`);
  return { ed25519: pair, hmacSecret };
}

/** The files of `keys/`: every node of a cluster holds the same, so that each accepts the others' tokens and links. */
export const KEY_FILES = [ED25519_FILE, HMAC_FILE] as const;
export type KeyFiles = Record<(typeof KEY_FILES)[number], string>;

/** The data dir's key files as they are on disk (base64 text), for a node that joins. */
export function readKeyFiles(dataDir: string): KeyFiles {
  loadOrCreateKeys(dataDir);
  const dir = join(dataDir, KEYS_DIR);
  return Object.fromEntries(KEY_FILES.map((file) => [file, readFileSync(join(dir, file), "utf8").trim()])) as KeyFiles;
}

/** Which of the key files `dataDir` holds already. */
export const presentKeyFiles = (dataDir: string): string[] => KEY_FILES.filter((file) => existsSync(join(dataDir, KEYS_DIR, file)));

/**
 * Writes another node's key files into a data dir that has none, each atomically (written beside,
 * then hard-linked, so that a server starting meanwhile never reads half a key); they are checked
 * as a start reads them before anything is written.
 */
export function installKeyFiles(dataDir: string, files: KeyFiles): void {
  const dir = join(dataDir, KEYS_DIR);
  const secret = Buffer.from(files[ED25519_FILE], "base64");
  if (secret.length !== nacl.sign.secretKeyLength) throw new Error(`${ED25519_FILE}: not an Ed25519 secret key`);
  if (Buffer.from(files[HMAC_FILE], "base64").length !== 32) throw new Error(`${HMAC_FILE}: not a 32-byte secret`);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  for (const file of KEY_FILES) {
    const path = join(dir, file);
    const tmp = `${path}.${process.pid}.new`;
    writeFileDurable(tmp, files[file] + "\n");
    try {
      linkSync(tmp, path);
    } finally {
      unlinkSync(tmp);
    }
  }
}
