/*
 * What only a PostgreSQL database needs, as one part (src/db/parts.ts): the build makes it a bundle
 * of its own, so that the embedded default neither loads nor holds pg and Kysely's PostgreSQL side.
 * Errors the main bundle must recognise (instanceof) are made by constructors it passes in.
 */
export { copyToPostgres, CopyRefused } from "./copy.ts";
export { openPostgresStore } from "./postgres-store.ts";
export { startClusterNode } from "../cluster/node.ts";
