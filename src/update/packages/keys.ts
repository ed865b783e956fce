/** Metadata key names under the configured product prefix (never a literal `svc`). */
export function packageKeys(prefix: string) {
  return {
    version: `${prefix}.software.version`,
    devtype: `${prefix}.hardware.devtype`,
    storageDirectory: `${prefix}.storage.directory`,
    /** Everything under this prefix belongs to the storage driver (reserved at upload). */
    reserved: `${prefix}.storage.`,
    localUuid: `${prefix}.storage.local.uuid`,
    localLength: `${prefix}.storage.local.length`,
    localDirectory: `${prefix}.storage.local.directory`,
    s3Uuid: `${prefix}.storage.s3.uuid`,
    s3Size: `${prefix}.storage.s3.size`,
    s3Directory: `${prefix}.storage.s3.directory`,
    /** The gateway's verdict on an upload's signature (signing.ts): set by it alone, reserved at upload. */
    signatureReserved: `${prefix}.signature.`,
    signatureStatus: `${prefix}.signature.status`,
    signatureKey: `${prefix}.signature.key`,
    signatureReason: `${prefix}.signature.reason`,
    /** A delta made by the gateway (deltas.ts): set by it alone, reserved at upload. */
    deltaReserved: `${prefix}.delta.`,
    deltaTarget: `${prefix}.delta.target`,
    deltaBase: `${prefix}.delta.base`,
    deltaTargetSha256: `${prefix}.delta.target_sha256`,
    deltaTargetSize: `${prefix}.delta.target_size`,
  };
}
export type PackageKeys = ReturnType<typeof packageKeys>;
