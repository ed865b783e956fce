import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { systemClock, type Clock } from "../util/time.ts";
import type { AppKeys } from "./keys.ts";
import { base64url, hmacSha256, signJwt, verifyJwt } from "./jwt.ts";
import { parseScopes, scopeName, type Scope } from "./scopes.ts";

export interface ManagementIdentity {
  kind: "mgmt";
  user: string;
  scopes: ReadonlySet<Scope>;
  expiresAt: number;
  /** When it was issued (UNIX milliseconds): a revocation by user ends what was issued until then. */
  issuedAtMs: number;
  /** The token's id (`jti`), by which it can be revoked; undefined for tokens made before ids. */
  jti?: string;
  /**
   * A console session's (POST /api/v1/auth/login) account session epoch: the token is good only
   * while its account is enabled with that epoch (the account gate, AuthGates). Undefined for other tokens.
   */
  session?: number;
  /** The token's own identity, when this one is it as its account stands now (src/auth/authority.ts). */
  token?: ManagementIdentity;
}

export interface DeviceIdentity {
  kind: "device";
  mac: string;
  deviceId: number;
  /** Fingerprint of the device key the token was issued for ("" when none): a key change ends the token (deviceGate). */
  key: string;
  expiresAt: number;
}

export type TokenFailure = "malformed" | "bad_signature" | "expired" | "wrong_type";

const MAX_CACHED = 10_000;
/** Enough for every device of a large lab holding one live token each. */
const MAX_CACHED_DEVICE = 50_000;

/** Verified tokens and their identities, so that each token pays for its signature check once. */
class IdentityCache<T extends { expiresAt: number }> {
  private readonly entries = new Map<string, T>();
  private readonly limit: number;

  constructor(limit: number) {
    this.limit = limit;
  }

  /** The identity of a token verified before; "expired" (and forgotten) once it has expired. */
  get(token: string, now: number): T | "expired" | undefined {
    const cached = this.entries.get(token);
    if (!cached) return undefined;
    if (cached.expiresAt > now) return cached;
    this.entries.delete(token);
    return "expired";
  }

  has(token: string): boolean {
    return this.entries.has(token);
  }

  /** Remembers a verified token; when full, the oldest entry goes. */
  set(token: string, identity: T): void {
    if (this.entries.size >= this.limit) this.entries.delete(this.entries.keys().next().value as string);
    this.entries.set(token, identity);
  }
}

/** A management token's issue time in ms: `iat_ms`, else `iat` (tokens made before it; fractional ones too), else 0. */
function issuedAtMs(payload: Record<string, unknown>): number {
  if (Number.isSafeInteger(payload.iat_ms)) return payload.iat_ms as number;
  return typeof payload.iat === "number" ? Math.round(payload.iat * 1000) : 0;
}

/** A management token's id: plain hex, so that a CLI flag never takes one for an option (base64url began with "-"). */
export const newTokenId = (): string => randomBytes(12).toString("hex");

/** Issues and verifies labgate's tokens and signed links (contract.md, Authentication). */
export class TokenService {
  private readonly keys: AppKeys;
  private readonly prefix: string;
  /** Verified management tokens: each token pays for its Ed25519 check once. */
  private readonly cache = new IdentityCache<ManagementIdentity>(MAX_CACHED);
  /**
   * Management tokens whose signature failed, by SHA-256 (a token may be as long as a header):
   * one forged token replayed costs a lookup. The oldest goes first when full.
   */
  private readonly forged = new Set<string>();
  /** Verified device tokens (the deviceGate still checks on every request that the device exists). */
  private readonly deviceCache = new IdentityCache<DeviceIdentity>(MAX_CACHED_DEVICE);
  /** Link signatures of the current second by purpose and subject: an update check signs the same link again and again. */
  private readonly linkCache = new Map<string, { expires: number; signature: string }>();
  private readonly clock: Clock;

  constructor(keys: AppKeys, prefix: string, clock: Clock = systemClock) {
    this.keys = keys;
    this.prefix = prefix;
    this.clock = clock;
  }

  /** UNIX seconds by the clock. */
  private now(): number {
    return Math.floor(this.clock.now() / 1000);
  }

  /**
   * A management token with a fresh id (`jti`, see src/auth/revocations.ts); `session` (the
   * account's session epoch) marks a console login's. `iat` and `exp` are whole seconds, as JWT
   * tools and the reference's clients read them; `iat_ms` is the issue time to the millisecond, so
   * that a revocation by user ends a token issued earlier in the same second and spares a later one.
   */
  issueManagement(user: string, scopes: readonly Scope[], ttlSeconds: number, options: { session?: number } = {}): string {
    const ms = this.clock.now();
    const iat = Math.floor(ms / 1000);
    const claims = { sub: user, scope: scopes.map((s) => scopeName(this.prefix, s)).join(" "), iat, iat_ms: ms, exp: iat + ttlSeconds, typ: "mgmt", jti: newTokenId() };
    return signJwt("EdDSA", { ...claims, ...(options.session === undefined ? {} : { ses: options.session }) }, this.keys.ed25519.secretKey);
  }

  verifyManagement(token: string): ManagementIdentity | TokenFailure {
    const now = this.now();
    const cached = this.cache.get(token, now);
    if (cached) return cached;
    const digest = createHash("sha256").update(token).digest("base64");
    if (this.forged.has(digest)) return "bad_signature";
    const payload = verifyJwt(token, "EdDSA", this.keys.ed25519.publicKey);
    if (payload === "bad_signature") {
      if (this.forged.size >= MAX_CACHED) this.forged.delete(this.forged.values().next().value as string);
      this.forged.add(digest);
    }
    if (typeof payload === "string") return payload;
    if (payload.typ !== "mgmt") return "wrong_type";
    if (typeof payload.sub !== "string" || !payload.sub || typeof payload.exp !== "number") return "malformed";
    if (payload.exp <= now) return "expired";
    const scopes = typeof payload.scope === "string" ? payload.scope.split(" ").filter(Boolean) : [];
    const identity: ManagementIdentity = {
      kind: "mgmt",
      user: payload.sub,
      scopes: parseScopes(this.prefix, scopes),
      expiresAt: payload.exp,
      issuedAtMs: issuedAtMs(payload),
      ...(typeof payload.jti === "string" ? { jti: payload.jti } : {}),
      ...(Number.isInteger(payload.ses) ? { session: payload.ses as number } : {}),
    };
    this.cache.set(token, identity);
    return identity;
  }

  /** A device token; `key` is the fingerprint of the key the device authenticated with. */
  issueDevice(mac: string, deviceId: number, ttlSeconds: number, key = ""): string {
    const iat = this.now();
    return signJwt("HS256", { sub: mac, did: deviceId, iat, exp: iat + ttlSeconds, typ: "device", ...(key ? { kf: key } : {}) }, this.keys.hmacSecret);
  }

  verifyDevice(token: string): DeviceIdentity | TokenFailure {
    const now = this.now();
    // Device tokens arrive with every update check: each one is verified once per lifetime.
    const cached = this.deviceCache.get(token, now);
    if (cached) return cached;
    const payload = verifyJwt(token, "HS256", this.keys.hmacSecret);
    if (typeof payload === "string") return payload;
    if (payload.typ !== "device") return "wrong_type";
    if (typeof payload.sub !== "string" || typeof payload.did !== "number" || typeof payload.exp !== "number") return "malformed";
    if (payload.exp <= now) return "expired";
    const key = typeof payload.kf === "string" ? payload.kf : "";
    const identity: DeviceIdentity = { kind: "device", mac: payload.sub, deviceId: payload.did, key, expiresAt: payload.exp };
    this.deviceCache.set(token, identity);
    return identity;
  }

  /** The kind of a token verified before and still cached (no parsing), else undefined. */
  knownType(token: string): "mgmt" | "device" | undefined {
    return this.deviceCache.has(token) ? "device" : this.cache.has(token) ? "mgmt" : undefined;
  }

  /** Tells which kind a token claims to be, without verifying it (to pick the verifier). */
  static claimedType(token: string): "mgmt" | "device" | undefined {
    const body = token.split(".")[1];
    if (!body) return undefined;
    try {
      const typ = JSON.parse(Buffer.from(body, "base64url").toString("utf8"))?.typ;
      return typ === "mgmt" || typ === "device" ? typ : undefined;
    } catch {
      return undefined;
    }
  }

  /**
   * Signs a link: `purpose` keeps a signature for one route from being valid on another.
   * Returns the query parameters `expires` and `signature` to append.
   */
  signLink(purpose: string, subject: string, ttlSeconds: number): { expires: number; signature: string } {
    const expires = this.now() + ttlSeconds;
    const key = `${purpose}\n${subject}`;
    const cached = this.linkCache.get(key);
    if (cached?.expires === expires) return { ...cached };
    const signed = { expires, signature: base64url(hmacSha256(this.keys.hmacSecret, `${key}\n${expires}`)) };
    if (this.linkCache.size >= MAX_CACHED) this.linkCache.clear();
    this.linkCache.set(key, signed);
    return { ...signed };
  }

  verifyLink(purpose: string, subject: string, expires: string | undefined, signature: string | undefined): "ok" | "invalid" | "expired" {
    if (!expires || !signature || !/^\d+$/.test(expires)) return "invalid";
    const expected = hmacSha256(this.keys.hmacSecret, `${purpose}\n${subject}\n${expires}`);
    const given = Buffer.from(signature, "base64url");
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) return "invalid";
    return Number(expires) > this.now() ? "ok" : "expired";
  }
}
