/**
 * Opens the configured engine's Store: the embedded database in the data dir, or PostgreSQL at
 * `database.url` (its part loaded only then), migrated either way.
 */
import { ConfigError } from "../util/config-error.ts";
import { Database, DatabaseUnavailableError } from "./database.ts";
import { migrate } from "./migrate.ts";
import { migrations } from "./migrations/index.ts";
import { loadPostgresPart } from "./parts.ts";
import { embeddedStore, type Store } from "./store.ts";
import { loadSqlJs } from "./wasm.ts";

export interface DatabaseSettings {
  dataDir: string;
  /** `database.url`; empty: the embedded database in `dataDir`. */
  url: string;
  checkpointIntervalMs?: number;
  checkpointBytes?: number;
  log: (level: "info" | "warn" | "error", message: string) => void;
}

export interface OpenedDatabase {
  store: Store;
  /** The embedded database, whose files, checkpoints and status are its own; undefined on PostgreSQL. */
  db: Database | undefined;
  /** The migration steps this open applied. */
  applied: number[];
  /** Ends the store, then the embedded database. */
  close(): Promise<void>;
}

export async function openDatabase(settings: DatabaseSettings): Promise<OpenedDatabase> {
  if (settings.url) {
    const { openPostgresStore } = await loadPostgresPart();
    const { store, applied } = await openPostgresStore({
      url: settings.url,
      migrations,
      unavailable: (message) => new DatabaseUnavailableError(message),
      unusable: (message) => new ConfigError(message),
      log: settings.log,
      sqlJs: async () => (await loadSqlJs()).SQL,
    });
    return { store, db: undefined, applied, close: () => store.close() };
  }
  const db = await Database.open(settings.dataDir, { checkpointIntervalMs: settings.checkpointIntervalMs, checkpointBytes: settings.checkpointBytes, log: settings.log });
  try {
    const applied = await migrate(db, migrations);
    const store = embeddedStore(db);
    return {
      store,
      db,
      applied,
      close: async () => {
        await store.close();
        await db.close();
      },
    };
  } catch (error) {
    await db.close().catch(() => {});
    throw error;
  }
}
