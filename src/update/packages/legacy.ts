/*
 * The package functions of callers that are still synchronous (a deployment's creation in its
 * `db.write`, the embedded backup's snapshot): the same queries as packages.ts. This file goes once
 * those are the Store's.
 */
import type { Database, Tx as SyncTx } from "../../db/index.ts";

export const packageExistsInWrite = (tx: SyncTx, id: number): boolean => tx.get("SELECT 1 AS x FROM packages WHERE id = ?", [id]) !== undefined;

/** The metadata column of a package (JSON text), or undefined when there is no such package. */
export const packageMetadataTextInWrite = (tx: SyncTx, id: number): string | undefined => tx.get<{ metadata: string }>("SELECT metadata FROM packages WHERE id = ?", [id])?.metadata;

/** storedNames (packages.ts) read at once from the embedded database, as the backup's snapshot takes them. */
export const storedNamesNow = (db: Pick<Database, "all">): string[] => db.all<{ storage_name: string }>("SELECT storage_name FROM packages ORDER BY id").map((r) => r.storage_name);
