import type { Migration } from "../migrate.ts";

/*
 * Several servers on one PostgreSQL database (src/cluster/, docs/cluster.md); on the embedded
 * engine the tables stay empty:
 *
 *   cluster_nodes    -- one row per node name: the instance (process) that holds the name now, how
 *                       the others reach it, when it started and last beat (ms, the database's
 *                       clock), whether it stopped cleanly, and the backend pid of its session
 *                       (which holds its jobs' advisory locks: a restart ends it)
 *   cluster_devices  -- which node holds each connected device's socket
 */
export const m036Cluster: Migration = {
  version: 36,
  name: "cluster",
  sql: [
    `CREATE TABLE cluster_nodes (
       name TEXT PRIMARY KEY,
       instance TEXT NOT NULL,
       advertise_url TEXT NOT NULL,
       version TEXT NOT NULL,
       started_at INTEGER NOT NULL,
       heartbeat_at INTEGER NOT NULL,
       stopped INTEGER NOT NULL DEFAULT 0,
       session_pid INTEGER
     )`,
    `CREATE TABLE cluster_devices (
       mac_address TEXT PRIMARY KEY,
       node TEXT NOT NULL,
       instance TEXT NOT NULL
     )`,
    `CREATE INDEX cluster_devices_node ON cluster_devices(node)`,
  ],
};
