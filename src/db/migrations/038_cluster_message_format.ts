import type { Migration } from "../migrate.ts";

/*
 * Which form of the cluster's NOTIFY payloads each node reads (src/cluster/node.ts, docs/cluster.md,
 * "Upgrades, node by node"), so that a node writes what every live node understands:
 *
 *   cluster_nodes.message_format  -- 1: a payload is one message (the nodes of the build before, whose
 *                                    rows this default fills); 2: a payload is a list of messages
 */
export const m038ClusterMessageFormat: Migration = {
  version: 38,
  name: "cluster_message_format",
  sql: [`ALTER TABLE cluster_nodes ADD COLUMN message_format INTEGER NOT NULL DEFAULT 1`],
};
