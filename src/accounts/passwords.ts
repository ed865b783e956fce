import { randomBytes, scrypt, timingSafeEqual, type ScryptOptions } from "node:crypto";

/**
 * scrypt cost: N=2^15, r=8, p=1 (32 MiB and about 0.1 s a check; the threadpool runs it, not the
 * event loop). Every account's hash uses it, the first admin's random one too: a failed login
 * takes the same time whatever the name, so it does not tell whose password was never changed.
 */
const PARAMS = { N: 32768, r: 8, p: 1 } as const;
const KEY_LENGTH = 32;
const SALT_BYTES = 16;
const maxmem = (o: { N: number; r: number; p: number }) => 256 * o.N * o.r + 1024 * 1024 * (o.p + 1);

function derive(password: string, salt: Buffer, options: ScryptOptions, length: number): Promise<Buffer> {
  return new Promise((resolve, reject) => scrypt(password.normalize("NFC"), salt, length, options, (error, key) => (error ? reject(error) : resolve(key))));
}

/** `scrypt$N$r$p$<salt>$<hash>` (base64) with a fresh random salt. */
export async function hashPassword(password: string): Promise<string> {
  const params = PARAMS;
  const salt = randomBytes(SALT_BYTES);
  const key = await derive(password, salt, { ...params, maxmem: maxmem(params) }, KEY_LENGTH);
  return `scrypt$${params.N}$${params.r}$${params.p}$${salt.toString("base64")}$${key.toString("base64")}`;
}

/** A stored hash that matches no password, checked when the account does not exist (same cost, same answer). */
export const DUMMY_HASH = `scrypt$${PARAMS.N}$${PARAMS.r}$${PARAMS.p}$${Buffer.alloc(SALT_BYTES).toString("base64")}$${Buffer.alloc(KEY_LENGTH).toString("base64")}`;

/** Whether a stored hash was made with other parameters than today's (it is made again at the next successful login). */
export const outdatedHash = (stored: string): boolean => !stored.startsWith(`scrypt$${PARAMS.N}$${PARAMS.r}$${PARAMS.p}$`);

/** Whether `password` matches `stored` (constant-time compare); a malformed hash matches nothing. */
export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const parts = stored.split("$");
  if (parts.length !== 6 || parts[0] !== "scrypt") return false;
  const [N, r, p] = parts.slice(1, 4).map(Number);
  const salt = Buffer.from(parts[4], "base64");
  const expected = Buffer.from(parts[5], "base64");
  if (![N, r, p].every((n) => Number.isInteger(n) && n > 0) || expected.length === 0) return false;
  const key = await derive(password, salt, { N, r, p, maxmem: maxmem({ N, r, p }) }, expected.length);
  return timingSafeEqual(key, expected);
}

/** A random password for a new account (the first admin's): 20 characters of base64url, 120 bits. */
export const randomPassword = (): string => randomBytes(15).toString("base64url");
