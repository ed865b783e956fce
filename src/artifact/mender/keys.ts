/*
 * Public keys that may sign a Mender artifact's manifest, and how each signs: RSA (PKCS#1 v1.5,
 * as mender-artifact 3.9 signs, or PSS, as later versions do), ECDSA P-256 (raw r||s, as
 * mender-artifact writes it, or DER) and Ed25519. A key is named by its fingerprint: the SHA-256
 * of its SubjectPublicKeyInfo DER, in hex (`openssl pkey -pubin -in KEY -outform DER | sha256sum`).
 */
import { constants, createHash, createPublicKey, verify, type KeyObject } from "node:crypto";
import { readFileSync } from "node:fs";

export interface VerifyKey {
  /** Where the key came from (a file name), for messages. */
  source: string;
  fingerprint: string;
  key: KeyObject;
}

/** A key file that holds no usable public key. */
export class KeyFileError extends Error {}

const PEM_BLOCK = /-----BEGIN ([A-Z ]+)-----[\s\S]*?-----END \1-----/g;

/** The fingerprint of a public key: SHA-256 of its SPKI DER, hex. */
export const fingerprintOf = (key: KeyObject): string => createHash("sha256").update(key.export({ type: "spki", format: "der" })).digest("hex");

/** Every public key of a PEM text (`PUBLIC KEY` or `RSA PUBLIC KEY` blocks); throws KeyFileError. */
export function parseVerifyKeys(pem: string, source: string): VerifyKey[] {
  const keys: VerifyKey[] = [];
  for (const [block, label] of pem.matchAll(PEM_BLOCK)) {
    if (label !== "PUBLIC KEY" && label !== "RSA PUBLIC KEY") {
      throw new KeyFileError(`${source}: holds a ${label}, not a public key (export it with openssl pkey -pubout)`);
    }
    let key: KeyObject;
    try {
      key = createPublicKey(block);
    } catch (error) {
      throw new KeyFileError(`${source}: unreadable public key (${(error as Error).message})`);
    }
    const type = key.asymmetricKeyType;
    const curve = key.asymmetricKeyDetails?.namedCurve;
    if (!(type === "rsa" || type === "rsa-pss" || type === "ed25519" || (type === "ec" && curve === "prime256v1"))) {
      throw new KeyFileError(`${source}: a ${type}${curve ? ` ${curve}` : ""} key; expected RSA, ECDSA P-256 or Ed25519`);
    }
    keys.push({ source, fingerprint: fingerprintOf(key), key });
  }
  if (keys.length === 0) throw new KeyFileError(`${source}: no PEM public key in it`);
  return keys;
}

/** The keys of each file, in order; throws KeyFileError naming the file. */
export function loadVerifyKeys(files: readonly string[]): VerifyKey[] {
  return files.flatMap((file) => {
    let text: string;
    try {
      text = readFileSync(file, "utf8");
    } catch (error) {
      throw new KeyFileError(`${file}: cannot be read (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`);
    }
    return parseVerifyKeys(text, file);
  });
}

/** Whether `signature` (raw bytes) is `key`'s signature of `data`, in any of the forms signers make. */
export function verifiesWith(key: KeyObject, data: Buffer, signature: Buffer): boolean {
  const attempt = (run: () => boolean) => {
    try {
      return run();
    } catch {
      return false; // a signature of the wrong shape for this key
    }
  };
  switch (key.asymmetricKeyType) {
    case "ed25519":
      return attempt(() => verify(null, data, key, signature));
    case "ec":
      return attempt(() => verify("sha256", data, { key, dsaEncoding: signature.length === 64 ? "ieee-p1363" : "der" }, signature));
    case "rsa-pss":
      return attempt(() => verify("sha256", data, { key, padding: constants.RSA_PKCS1_PSS_PADDING, saltLength: constants.RSA_PSS_SALTLEN_AUTO }, signature));
    default:
      return (
        attempt(() => verify("sha256", data, { key, padding: constants.RSA_PKCS1_PADDING }, signature)) ||
        attempt(() => verify("sha256", data, { key, padding: constants.RSA_PKCS1_PSS_PADDING, saltLength: constants.RSA_PSS_SALTLEN_AUTO }, signature))
      );
  }
}
