export { Database, DatabaseCorruptError, DatabaseUnavailableError, IMAGE_FILE, IMAGE_SUM_FILE } from "./database.ts";
export type { DatabaseOptions, DatabaseStatus, Row, RunResult, SqlParam, Tx } from "./database.ts";
export { hasTable, migrate, schemaVersion, SchemaTooNewError } from "./migrate.ts";
export { migrations } from "./migrations/index.ts";
