/*
 * Signed packages at the gateway (update_server.signing): an upload is checked as it streams in
 * (src/artifact/mender/reader.ts) against the configured keys. With `required`, a package that is
 * not signed by one of them is refused before it is stored; otherwise it is stored with the
 * verdict in its metadata (`<prefix>.signature.status`: signed, unsigned or invalid; `.key`: the
 * signing key's fingerprint, SHA-256 of its SPKI DER in hex; `.reason` when it is not signed).
 */
import type { Readable } from "node:stream";
import { KeyFileError, loadVerifyKeys, type VerifyKey } from "../../artifact/mender/keys.ts";
import { ArtifactCheck, ArtifactError } from "../../artifact/mender/reader.ts";
import { ConfigError } from "../../util/config-error.ts";
import type { StagedObject } from "../../storage/local.ts";
import type { PackageStorage } from "../../storage/packages.ts";
import { LabgateError } from "../../util/errors.ts";
import type { PackageKeys } from "./keys.ts";

export interface SignaturePolicy {
  keys: VerifyKey[];
  required: boolean;
}

export type SignatureStatus = "signed" | "unsigned" | "invalid";

/** What the check made of an upload. */
export interface SignatureMark {
  status: SignatureStatus;
  /** The fingerprint of the key that signed it (signed). */
  key?: string;
  /** Why it is not signed (`unsigned: ...`, `no key matches: ...`, ...). */
  reason?: string;
}

/** The configured policy with its keys read; undefined when no keys are configured. Throws ConfigError for an unusable key file. */
export function signaturePolicy(signing: { keys: readonly string[]; required: boolean }): SignaturePolicy | undefined {
  if (signing.keys.length === 0) return undefined;
  try {
    return { keys: loadVerifyKeys(signing.keys), required: signing.required };
  } catch (error) {
    if (error instanceof KeyFileError) throw new ConfigError(`config key update_server.signing.keys: ${error.message}`);
    throw error;
  }
}

export function signatureMetadata(keys: PackageKeys, mark: SignatureMark): Record<string, string> {
  return {
    [keys.signatureStatus]: mark.status,
    ...(mark.key ? { [keys.signatureKey]: mark.key } : {}),
    ...(mark.reason ? { [keys.signatureReason]: mark.reason } : {}),
  };
}

/** The verdict a package's metadata records; undefined for a package stored while signatures were not checked. */
export function signatureOf(keys: PackageKeys, metadata: Readonly<Record<string, unknown>>): SignatureMark | undefined {
  const status = metadata[keys.signatureStatus];
  if (status !== "signed" && status !== "unsigned" && status !== "invalid") return undefined;
  const key = metadata[keys.signatureKey];
  const reason = metadata[keys.signatureReason];
  return { status, ...(typeof key === "string" ? { key } : {}), ...(typeof reason === "string" ? { reason } : {}) };
}

const refusal = (error: ArtifactError) => new LabgateError("invalid", `signature: ${error.message} (this gateway stores only packages signed by one of update_server.signing.keys)`);

/**
 * Stages an upload while its signature and checksums are checked on the way. With a required
 * signature the upload stops at the first check that fails (400 naming it) and nothing is kept.
 */
export async function stageChecked(storage: PackageStorage, stream: Readable, policy: SignaturePolicy): Promise<{ staged: StagedObject; signature: SignatureMark }> {
  const check = new ArtifactCheck({ keys: policy.keys });
  const tapped = check.tap();
  stream.on("error", (error) => tapped.destroy(error));
  let refused: LabgateError | undefined;
  if (policy.required) {
    check.result.catch((error: unknown) => {
      if (error instanceof ArtifactError) tapped.destroy((refused = refusal(error)));
    });
  }
  let staged: StagedObject;
  try {
    staged = await storage.stage(stream.pipe(tapped));
  } catch (error) {
    throw refused ?? error;
  }
  try {
    const info = await check.end();
    return { staged, signature: { status: "signed", key: info.signed_by!.fingerprint } };
  } catch (error) {
    if (!(error instanceof ArtifactError)) {
      await storage.discard(staged);
      throw error;
    }
    if (policy.required) {
      await storage.discard(staged);
      throw refusal(error);
    }
    return { staged, signature: { status: error.problem === "unsigned" ? "unsigned" : "invalid", reason: error.message } };
  }
}

/** A deployment that devices would refuse for its signature (GET /api/v2/deployments/preflight). */
export interface SignatureWarning {
  code: "unsigned_package" | "untrusted_key";
  message: string;
  package: number;
  /** The devices (of the package's device type) that would refuse it. */
  devices: number[];
}

/**
 * Warnings for offering `packages` to `devices` that require signatures: a package that is not
 * signed (or was stored before signatures were checked), or signed by a key none of them trusts.
 */
export function signatureWarnings(
  keys: PackageKeys,
  packages: ReadonlyArray<{ id: number; version: string; devtype: string; metadata: Readonly<Record<string, unknown>> }>,
  devices: ReadonlyArray<{ id: number; devtype: string; keys: readonly string[] }>,
): SignatureWarning[] {
  const warnings: SignatureWarning[] = [];
  for (const pkg of packages) {
    const strict = devices.filter((d) => d.devtype === pkg.devtype);
    if (strict.length === 0) continue;
    const mark = signatureOf(keys, pkg.metadata);
    const who = (ids: number[]) => `${ids.length} device(s) of the group require signed updates (verify_keys) and will refuse it`;
    if (mark?.status !== "signed") {
      const devicesOf = strict.map((d) => d.id);
      const why = mark ? (mark.reason ?? mark.status) : "its signature was not checked at upload (update_server.signing.keys)";
      warnings.push({ code: "unsigned_package", message: `package ${pkg.id} (${pkg.version}) is not signed: ${why}; ${who(devicesOf)}`, package: pkg.id, devices: devicesOf });
      continue;
    }
    const refusing = strict.filter((d) => !d.keys.includes(mark.key!)).map((d) => d.id);
    if (refusing.length > 0) {
      warnings.push({ code: "untrusted_key", message: `package ${pkg.id} (${pkg.version}) is signed by key ${mark.key}, which ${refusing.length} device(s) of the group do not trust; they will refuse it`, package: pkg.id, devices: refusing });
    }
  }
  return warnings;
}
