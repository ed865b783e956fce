import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import initSqlJs from "sql.js";
import type { SqlJsStatic } from "sql.js";
import { seaAssets } from "../util/sea.ts";

export type WasmSource = "sea-asset" | "env" | "node_modules";

export interface LoadedSqlJs {
  SQL: SqlJsStatic;
  source: WasmSource;
  /** The wasm bytes, for a worker thread that needs its own instance. */
  wasm: Uint8Array;
}

let loaded: Promise<LoadedSqlJs> | undefined;

/** Finds the sql.js wasm bytes: inside the single executable first, where package resolution does not exist. */
function wasmBytes(): { bytes: Uint8Array; source: WasmSource } {
  const sea = seaAssets();
  if (sea) return { bytes: new Uint8Array(sea.getAsset("sql-wasm.wasm")), source: "sea-asset" };
  const override = process.env.SQL_WASM_PATH;
  if (override) return { bytes: readFileSync(override), source: "env" };
  const path = createRequire(import.meta.url).resolve("sql.js/dist/sql-wasm.wasm");
  return { bytes: readFileSync(path), source: "node_modules" };
}

export function loadSqlJs(): Promise<LoadedSqlJs> {
  loaded ??= (async () => {
    const { bytes, source } = wasmBytes();
    // sql.js keeps the buffer it was given for good: it is the one kept for workers too when the
    // bytes fill it (as they do read from a file or the executable), not a second copy of the module.
    const whole = bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength;
    const wasmBinary = (whole ? bytes.buffer : bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength)) as ArrayBuffer;
    const SQL = await initSqlJs({ wasmBinary });
    return { SQL, source, wasm: bytes };
  })();
  return loaded;
}
