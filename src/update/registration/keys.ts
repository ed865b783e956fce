import { constants, createHash, createPublicKey, verify, type KeyObject } from "node:crypto";

/** A device public key, parsed once; compared by `fingerprint` (SHA-256 of its SPKI DER), never by PEM text. */
export interface DeviceKey {
  key: KeyObject;
  type: "rsa" | "ec" | "ed25519";
  fingerprint: string;
}

const MIN_RSA_BITS = 1024;
/** Larger moduli make every signature check of a registration cost more (and no device uses them). */
const MAX_RSA_BITS = 8192;
/** Public exponents devices use; a huge one makes each verification cost milliseconds. */
const RSA_EXPONENTS = new Set([3n, 65537n]);
const PEM_LABEL = /^[A-Z0-9 ]+$/;

/** The label and body of the first PEM block (a scan, linear in the text), else undefined. */
function pemBlock(text: string): { label: string; body: string } | undefined {
  const begin = text.indexOf("-----BEGIN ");
  if (begin === -1) return undefined;
  const labelStart = begin + "-----BEGIN ".length;
  const labelEnd = text.indexOf("-----", labelStart);
  if (labelEnd === -1) return undefined;
  const label = text.slice(labelStart, labelEnd);
  if (!PEM_LABEL.test(label)) return undefined;
  const end = text.indexOf(`-----END ${label}-----`, labelEnd + 5);
  return end === -1 ? undefined : { label, body: text.slice(labelEnd + 5, end) };
}

function importDer(der: Buffer, order: ("spki" | "pkcs1")[]): KeyObject | undefined {
  for (const type of order) {
    try {
      return createPublicKey({ key: der, format: "der", type });
    } catch {
      /* try the next encoding */
    }
  }
  return undefined;
}

/**
 * Parses a device key as devices send it: PEM SubjectPublicKeyInfo
 * (`PUBLIC KEY`, RSA or Ed25519), PEM PKCS#1 (`RSA PUBLIC KEY`), PKCS#1 DER under a `PUBLIC KEY`
 * label (what the reference device clients send), or bare base64 DER of either. RSA keys need
 * at least 1024 bits; ECDSA P-256 keys only with `ecdsa` (a protocol whose clients use them:
 * Mender's). Returns a reason string when the key is not usable.
 */
export function parseDeviceKey(text: string, { ecdsa = false }: { ecdsa?: boolean } = {}): DeviceKey | string {
  if (text.length > 16_384) return "public key is too long";
  // Some clients escape newlines twice; base64 never contains a backslash.
  const cleaned = text.replace(/\\n/g, "\n").trim();
  const pem = pemBlock(cleaned);
  let label: string | undefined;
  let body = cleaned;
  if (pem) {
    label = pem.label;
    // Drop RFC 1421 style headers ("Proc-Type: ...") if any, keep the base64 lines.
    body = pem.body
      .split(/\r?\n/)
      .filter((line) => !line.includes(":"))
      .join("");
  } else if (cleaned.includes("-----")) {
    return "public key: malformed PEM armour";
  }
  if (label !== undefined && label !== "PUBLIC KEY" && label !== "RSA PUBLIC KEY") {
    return `public key: unsupported PEM type "${label}" (expected PUBLIC KEY or RSA PUBLIC KEY)`;
  }
  const base64 = body.replace(/\s+/g, "");
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(base64)) return "public key: not valid base64";
  const der = Buffer.from(base64, "base64");
  const key = importDer(der, label === "RSA PUBLIC KEY" ? ["pkcs1", "spki"] : ["spki", "pkcs1"]);
  if (!key) return "public key: not an SPKI or PKCS#1 public key";
  const type = key.asymmetricKeyType;
  if (type === "rsa") {
    const bits = key.asymmetricKeyDetails?.modulusLength ?? 0;
    if (bits < MIN_RSA_BITS) return `public key: RSA keys need at least ${MIN_RSA_BITS} bits, got ${bits}`;
    if (bits > MAX_RSA_BITS) return `public key: RSA keys may have at most ${MAX_RSA_BITS} bits, got ${bits}`;
    const exponent = key.asymmetricKeyDetails?.publicExponent;
    if (exponent === undefined || !RSA_EXPONENTS.has(exponent)) return "public key: the RSA public exponent must be 3 or 65537";
  } else if (type === "ec" && ecdsa) {
    const curve = key.asymmetricKeyDetails?.namedCurve;
    if (curve !== "prime256v1") return `public key: ECDSA keys must be on P-256, got ${curve ?? "an unknown curve"}`;
  } else if (type !== "ed25519") {
    return `public key: unsupported key type ${type ?? "unknown"} (expected RSA or Ed25519)`;
  }
  const fingerprint = createHash("sha256").update(key.export({ type: "spki", format: "der" })).digest("hex");
  return { key, type, fingerprint };
}

/**
 * Decodes a signature header: standard base64 with padding. Undefined when it is not base64.
 */
export function decodeSignature(header: string): Buffer | undefined {
  const text = header.trim();
  if (text.length === 0 || text.length % 4 !== 0 || !/^[A-Za-z0-9+/]+={0,2}$/.test(text)) return undefined;
  return Buffer.from(text, "base64");
}

/**
 * Verifies a device signature over `data` (the raw request body): RSASSA-PKCS1-v1_5 with
 * SHA-256 for RSA keys, ECDSA with SHA-256 for P-256 keys (DER, as Go and OpenSSL write it, or the
 * 64 bytes of r and s), Ed25519 (pure) for Ed25519 keys. One node:crypto path for all.
 */
export function verifyDeviceSignature(key: DeviceKey, data: Uint8Array, signature: Uint8Array): boolean {
  try {
    if (key.type === "ed25519") return verify(null, data, key.key, signature);
    if (key.type === "ec") return verify("sha256", data, { key: key.key, dsaEncoding: signature.length === 64 ? "ieee-p1363" : "der" }, signature);
    return verify("sha256", data, { key: key.key, padding: constants.RSA_PKCS1_PADDING }, signature);
  } catch {
    return false;
  }
}
