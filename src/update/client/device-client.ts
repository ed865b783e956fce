/*
 * The device side of the update server's authorization (docs/device-protocol.md): key
 * generation, the signed auth request, a cached device token refreshed shortly before it
 * expires and after a 401. Used by the labgate agent and the tests. Node only.
 */
import { constants, createHash, createPrivateKey, createPublicKey, generateKeyPairSync, sign, type KeyObject } from "node:crypto";
import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { dirname } from "node:path";
import { writeFileDurable } from "../../util/files.ts";
import type { Metadata } from "../devices/metadata.ts";
import { httpRequest, type HttpAnswer, type HttpClient, type HttpRequest } from "./http.ts";

export type DeviceKeyType = "rsa" | "ed25519";

/**
 * How the public key is written into the auth request:
 * - `spki`: `-----BEGIN PUBLIC KEY-----` SubjectPublicKeyInfo (RSA or Ed25519);
 * - `pkcs1`: `-----BEGIN RSA PUBLIC KEY-----` (RSA only);
 * - `pkcs1-in-spki-label`: PKCS#1 DER under a `PUBLIC KEY` label, as the reference clients send (RSA only).
 */
export type PublicKeyEncoding = "spki" | "pkcs1" | "pkcs1-in-spki-label";

export interface DeviceKeyPair {
  type: DeviceKeyType;
  /** PKCS#8 PEM; keep it secret (mode 0600 on disk). */
  privateKeyPem: string;
}

export function generateDeviceKey(type: DeviceKeyType = "rsa", rsaBits = 2048): DeviceKeyPair {
  const { privateKey } =
    type === "rsa" ? generateKeyPairSync("rsa", { modulusLength: rsaBits, publicExponent: 0x10001 }) : generateKeyPairSync("ed25519");
  return { type, privateKeyPem: privateKey.export({ type: "pkcs8", format: "pem" }) as string };
}

/**
 * The device's key kept at `path` (PKCS#8 PEM, mode 0600), made on first use. A device keeps
 * its key for life: a new key means a new registration that an administrator must confirm.
 */
export function loadOrCreateDeviceKey(path: string, type: DeviceKeyType = "rsa"): DeviceKeyPair {
  if (existsSync(path)) {
    const privateKeyPem = readFileSync(path, "utf8");
    const kind = createPrivateKey(privateKeyPem).asymmetricKeyType;
    if (kind !== "rsa" && kind !== "ed25519") throw new Error(`${path}: unsupported key type ${kind}`);
    return { type: kind, privateKeyPem };
  }
  const pair = generateDeviceKey(type);
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  writeFileDurable(path, pair.privateKeyPem, 0o600);
  return pair;
}

const pemWrap = (label: string, der: Buffer): string =>
  `-----BEGIN ${label}-----\n${der.toString("base64").replace(/(.{64})/g, "$1\n").replace(/\n$/, "")}\n-----END ${label}-----\n`;

/** The public key of `privateKeyPem`, written as `encoding`. */
export function publicKeyPem(privateKeyPem: string, encoding: PublicKeyEncoding = "spki"): string {
  const pub = createPublicKey(createPrivateKey(privateKeyPem));
  if (encoding === "spki") return pub.export({ type: "spki", format: "pem" }) as string;
  if (pub.asymmetricKeyType !== "rsa") throw new Error(`${encoding} encoding is for RSA keys only`);
  const der = pub.export({ type: "pkcs1", format: "der" });
  return pemWrap(encoding === "pkcs1" ? "RSA PUBLIC KEY" : "PUBLIC KEY", der);
}

/** Base64 signature of the exact body bytes: RSASSA-PKCS1-v1_5/SHA-256 for RSA, Ed25519 otherwise. */
/**
 * The key's fingerprint as the gateway shows it on Registrations: SHA-256 of the public key's
 * SPKI DER, hex, in groups of four digits (so a person can compare the two).
 */
export function keyFingerprint(privateKeyPem: string): string {
  const der = createPublicKey(createPrivateKey(privateKeyPem)).export({ type: "spki", format: "der" });
  return createHash("sha256").update(der).digest("hex").match(/.{4}/g)!.join(" ");
}

export function signBody(privateKey: string | KeyObject, body: Uint8Array): string {
  const key = typeof privateKey === "string" ? createPrivateKey(privateKey) : privateKey;
  const signature =
    key.asymmetricKeyType === "rsa" ? sign("sha256", body, { key, padding: constants.RSA_PKCS1_PADDING }) : sign(null, body, key);
  return signature.toString("base64");
}

/** The metadata a device reports (docs/device-protocol.md). */
export type { Metadata };

/** Signed timestamps a client remembers: each is at least a second after the last, so they span more than the timestamp window (600 s by default). */
const USED_TIMESTAMPS = 1024;

export interface DeviceClientOptions {
  /** Base URL of the gateway, e.g. `http://gateway:5000`. */
  server: string;
  privateKeyPem: string;
  /** Device metadata sent with every auth request; must hold the version, devtype and MAC keys. */
  metadata: Metadata;
  /** Product prefix of the signature header (config `prefix`). */
  prefix?: string;
  publicKeyEncoding?: PublicKeyEncoding;
  /** Re-authorize when fewer than this many seconds of token lifetime remain (reference client: 5). */
  refreshMargin?: number;
  /** Clock in UNIX seconds (tests move it). */
  now?: () => number;
  /** How requests go (./http.ts; tests count them). */
  http?: HttpClient;
}

export type AuthOutcome = { status: "accepted"; token: string; expires: number } | { status: "pending" };

/** The server refused the auth request itself (400: schema, key or signature), not "not yet accepted". */
export class DeviceAuthError extends Error {
  readonly status: number;
  constructor(status: number, message: string) {
    super(message);
    this.status = status;
  }
}

/** A request; `json` is serialised. Bodies are sent twice after a 401, so use a string, not a stream. */
export type RequestOptions = Omit<HttpRequest, "body"> & { body?: string | Uint8Array; json?: unknown };

export class DeviceClient {
  private readonly options: Required<DeviceClientOptions>;
  private readonly privateKey: KeyObject;
  private readonly publicKey: string;
  private token: string | undefined;
  private tokenExpiresAt = 0;
  private lastTimestamp = 0;
  /**
   * Timestamps signed lately, oldest first (at most USED_TIMESTAMPS). After a clock correction
   * the clock may go back to a second already signed; the same metadata and key then make the
   * same body, which the server refuses as a replay.
   */
  private readonly used = new Set<number>();
  private inflight: Promise<AuthOutcome> | undefined;

  constructor(options: DeviceClientOptions) {
    this.options = {
      ...options,
      prefix: options.prefix ?? "svc",
      publicKeyEncoding: options.publicKeyEncoding ?? "spki",
      refreshMargin: options.refreshMargin ?? 5,
      now: options.now ?? (() => Math.floor(Date.now() / 1000)),
      server: options.server.replace(/\/+$/, ""),
      http: options.http ?? httpRequest,
    };
    this.privateKey = createPrivateKey(options.privateKeyPem);
    this.publicKey = publicKeyPem(options.privateKeyPem, this.options.publicKeyEncoding);
  }

  get publicKeyPem(): string {
    return this.publicKey;
  }

  get mac(): string {
    return this.options.metadata[`${this.options.prefix}.hardware.macaddr`] as string;
  }

  /** Replaces the metadata sent with the next auth request (e.g. after an update). */
  setMetadata(metadata: Metadata): void {
    this.options.metadata = metadata;
  }

  /** Builds a signed auth request: the exact body bytes and the signature header value. */
  signedAuthRequest(): { body: string; signature: string; header: string } {
    // Strictly increasing timestamps, and none signed lately: the server refuses a body it has already seen.
    let timestamp = Math.max(this.options.now(), this.lastTimestamp + 1);
    while (this.used.has(timestamp)) timestamp += 1;
    this.lastTimestamp = timestamp;
    this.used.add(timestamp);
    if (this.used.size > USED_TIMESTAMPS) this.used.delete(this.used.values().next().value as number);
    const body = JSON.stringify({ metadata: this.options.metadata, public_key: this.publicKey, timestamp });
    const header = `X-${this.options.prefix.toUpperCase()}-Device-Signature`;
    return { body, signature: signBody(this.privateKey, Buffer.from(body)), header };
  }

  /** One auth request: a fresh token when the device is accepted, `pending` otherwise. */
  authorize(): Promise<AuthOutcome> {
    this.inflight ??= this.doAuthorize().finally(() => (this.inflight = undefined));
    return this.inflight;
  }

  private async doAuthorize(): Promise<AuthOutcome> {
    const { body, signature, header } = this.signedAuthRequest();
    const started = this.options.now();
    const response = await this.options.http(`${this.options.server}/api/v1/auth/device`, {
      method: "POST",
      headers: { "content-type": "application/json", [header]: signature },
      body,
    });
    const answer = (await response.json().catch(() => ({}))) as { token?: string; expires?: number; error?: string };
    if (response.status === 401) {
      this.token = undefined;
      return { status: "pending" };
    }
    if (response.status !== 200 || typeof answer.token !== "string" || typeof answer.expires !== "number") {
      throw new DeviceAuthError(response.status, answer.error ?? `device authorization failed with status ${response.status}`);
    }
    this.token = answer.token;
    // `expires` is a lifetime in seconds; count it from when the request was sent.
    this.tokenExpiresAt = started + answer.expires;
    return { status: "accepted", token: answer.token, expires: answer.expires };
  }

  /** A token valid for at least `refreshMargin` more seconds, or undefined while the device is pending. */
  async getToken(): Promise<string | undefined> {
    if (this.token && this.tokenExpiresAt - this.options.now() > this.options.refreshMargin) return this.token;
    const outcome = await this.authorize();
    return outcome.status === "accepted" ? outcome.token : undefined;
  }

  /**
   * The clock was corrected (it was far off, the server refused its timestamps): the next
   * timestamps follow the corrected clock, even when it went back (skipping those signed lately).
   */
  clockCorrected(): void {
    this.lastTimestamp = 0;
  }

  /** Forgets the cached token (the next call authorizes again). */
  dropToken(): void {
    this.token = undefined;
  }

  /**
   * A request with the device token (`Authorization: Bearer token=...`). A 401 answer means the
   * token was refused: authorize again once and repeat the request.
   */
  async request(path: string, init: RequestOptions = {}): Promise<HttpAnswer> {
    const { json, ...rest } = init;
    const send = async (token: string | undefined) => {
      const headers = { ...rest.headers };
      if (token) headers.authorization = `Bearer token=${token}`;
      if (json !== undefined) headers["content-type"] = "application/json";
      return this.options.http(`${this.options.server}${path}`, { ...rest, headers, body: json !== undefined ? JSON.stringify(json) : rest.body });
    };
    const first = await send(await this.getToken());
    if (first.status !== 401) return first;
    first.discard();
    this.token = undefined;
    return send(await this.getToken());
  }
}
