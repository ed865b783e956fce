/** What labgate uses of node:sea, Node's single-executable API (present from Node 20.16). */
export interface SeaAssets {
  /** A copy of the asset's bytes. */
  getAsset(key: string): ArrayBuffer;
  getAsset(key: string, encoding: "utf8"): string;
  /** The asset's bytes inside the executable's mapping, without a copy (read-only). */
  getRawAsset(key: string): ArrayBuffer;
}

/** The executable's assets (build/sea-config.mjs) when this process is the single executable, else undefined. */
export function seaAssets(): SeaAssets | undefined {
  const sea = process.getBuiltinModule?.("node:sea") as (SeaAssets & { isSea(): boolean }) | undefined;
  return sea?.isSea() ? sea : undefined;
}
