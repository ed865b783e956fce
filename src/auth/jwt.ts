import { createHmac, createPublicKey, timingSafeEqual, verify, type KeyObject } from "node:crypto";
import nacl from "tweetnacl";

export type JwtAlg = "EdDSA" | "HS256";
export type JwtPayload = Record<string, unknown>;

export const base64url = (data: Uint8Array | string): string => Buffer.from(data).toString("base64url");

const HEADERS: Record<JwtAlg, string> = {
  EdDSA: base64url(JSON.stringify({ alg: "EdDSA", typ: "JWT" })),
  HS256: base64url(JSON.stringify({ alg: "HS256", typ: "JWT" })),
};

export type JwtFailure = "malformed" | "bad_signature";

export interface DecodedJwt {
  alg: string;
  payload: JwtPayload;
  signingInput: string;
  signature: Buffer;
}

/** Splits and decodes a compact JWT without verifying it. */
export function decodeJwt(token: string): DecodedJwt | JwtFailure {
  const parts = token.split(".");
  if (parts.length !== 3 || parts.some((p) => !/^[A-Za-z0-9_-]*$/.test(p))) return "malformed";
  try {
    const header = JSON.parse(Buffer.from(parts[0], "base64url").toString("utf8"));
    const payload = JSON.parse(Buffer.from(parts[1], "base64url").toString("utf8"));
    if (typeof header !== "object" || header === null || typeof payload !== "object" || payload === null || Array.isArray(payload)) {
      return "malformed";
    }
    return { alg: String(header.alg), payload, signingInput: `${parts[0]}.${parts[1]}`, signature: Buffer.from(parts[2], "base64url") };
  } catch {
    return "malformed";
  }
}

export function hmacSha256(secret: Uint8Array, data: string): Buffer {
  return createHmac("sha256", secret).update(data).digest();
}

export function signJwt(alg: "EdDSA", payload: JwtPayload, key: Uint8Array): string;
export function signJwt(alg: "HS256", payload: JwtPayload, key: Uint8Array): string;
export function signJwt(alg: JwtAlg, payload: JwtPayload, key: Uint8Array): string {
  const signingInput = `${HEADERS[alg]}.${base64url(JSON.stringify(payload))}`;
  const signature = alg === "EdDSA" ? nacl.sign.detached(Buffer.from(signingInput), key) : hmacSha256(key, signingInput);
  return `${signingInput}.${base64url(signature)}`;
}

/** node:crypto's form of an Ed25519 public key (the same 32 bytes tweetnacl uses), made once per key. */
const ed25519Keys = new Map<string, KeyObject>();
function ed25519PublicKey(raw: Uint8Array): KeyObject {
  const x = base64url(raw);
  let key = ed25519Keys.get(x);
  if (!key) {
    if (ed25519Keys.size >= 16) ed25519Keys.clear();
    key = createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x }, format: "jwk" });
    ed25519Keys.set(x, key);
  }
  return key;
}

/**
 * Verifies a JWT of the given algorithm; the algorithm in the header must match (no alg confusion).
 * EdDSA signatures are checked by node:crypto, far faster than tweetnacl (which signs): a forged
 * token must cost the server little.
 */
export function verifyJwt(token: string, alg: JwtAlg, key: Uint8Array): JwtPayload | JwtFailure {
  const decoded = decodeJwt(token);
  if (typeof decoded === "string") return decoded;
  if (decoded.alg !== alg) return "bad_signature";
  let ok: boolean;
  if (alg === "EdDSA") {
    ok = decoded.signature.length === nacl.sign.signatureLength && verify(null, Buffer.from(decoded.signingInput), ed25519PublicKey(key), decoded.signature);
  } else {
    const expected = hmacSha256(key, decoded.signingInput);
    ok = decoded.signature.length === expected.length && timingSafeEqual(decoded.signature, expected);
  }
  return ok ? decoded.payload : "bad_signature";
}
