import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, sep } from "node:path";
import { fileURLToPath } from "node:url";

interface SeaModule {
  isSea(): boolean;
  getAsset(key: string): ArrayBuffer;
  getAssetKeys?(): string[];
}

const sea = process.getBuiltinModule?.("node:sea") as SeaModule | undefined;
const inSea = sea?.isSea() ?? false;

/** The repository's assets/ folder when running from source or from the bundle next to it. */
function assetsDir(): string {
  for (let dir = dirname(fileURLToPath(import.meta.url)); ; dir = dirname(dir)) {
    if (existsSync(join(dir, "assets")) && existsSync(join(dir, "package.json"))) return join(dir, "assets");
    if (dirname(dir) === dir) throw new Error("assets/ folder not found");
  }
}

/** Reads a shipped file by its path under assets/ (e.g. `testrun/exec.yml`), from the executable or the repo. */
export function readAsset(path: string): Buffer {
  if (inSea) return Buffer.from(sea!.getAsset(`assets/${path}`));
  return readFileSync(join(assetsDir(), path));
}

/** Paths under assets/ that start with `prefix`, sorted. */
export function listAssets(prefix = ""): string[] {
  let keys: string[];
  if (inSea) {
    keys = (sea!.getAssetKeys?.() ?? []).filter((k) => k.startsWith("assets/")).map((k) => k.slice("assets/".length));
  } else {
    const root = assetsDir();
    const walk = (dir: string): string[] =>
      readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? walk(join(dir, e.name)) : e.name.startsWith(".") ? [] : [relative(root, join(dir, e.name)).split(sep).join("/")]));
    keys = walk(root);
  }
  return keys.filter((k) => k.startsWith(prefix)).sort();
}
