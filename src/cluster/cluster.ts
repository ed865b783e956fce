/*
 * What the domains know of the cluster (docs/cluster.md): which node runs each job now, what the
 * nodes are, where device sockets are. On the embedded database there is one node, which runs every
 * job; on PostgreSQL the node's machinery (src/cluster/node.ts) is loaded from PostgreSQL's part.
 */
import { hostname } from "node:os";

/** The work one node at a time does: the deployments' time decisions, the sweeps, the test-run queue. */
export const JOBS = ["deployments", "audit_retention", "progress_expiry", "test_runs", "node_sweep"] as const;
export type Job = (typeof JOBS)[number];

/** A node as `GET /api/v1/cluster` shows it. */
export interface NodeView {
  name: string;
  advertise_url: string;
  /** `up`: it beat recently; `down`: it stopped beating (killed, cut off); `stopped`: it shut down. */
  state: "up" | "down" | "stopped";
  connected_devices: number;
  jobs: Job[];
}

export interface Cluster {
  /** This node's name (`cluster.node_name`, else the host name). */
  readonly name: string;
  /** Whether this node runs `job` now; a job's loop asks before each round. */
  runs(job: Job): boolean;
  /** Runs `hook` whenever this node takes `job` (memory that another node changed is read again first). */
  onTaken(job: Job, hook: () => void): void;
  /** Sends `data` (JSON, a few KiB at most) to every other node's handlers of `topic`; nothing is kept for a node that is down. */
  publish(topic: Topic, data?: unknown): void;
  /** Runs `handler` with what another node published on `topic`. */
  on(topic: Topic, handler: (data: unknown) => void): void;
  /** Every node, this one with `localDevices` sockets. */
  nodes(localDevices: number): Promise<NodeView[]>;
  /** A device's socket opened or closed on this node. */
  deviceConnected(mac: string): void;
  deviceDisconnected(mac: string): void;
  /** The other node that holds the device's socket now (undefined: none, or this one); as this node last heard. */
  locate(mac: string): PeerNode | undefined;
  /**
   * Runs `hook` with the name of another node once this one learns that node's process is gone
   * (killed, stopped, silent past the down bound, or replaced by a restart under its name): what
   * it held in memory went with it. Once per loss.
   */
  onNodeLost(hook: (name: string) => void): void;
  /** A short-lived credential for a request from this node to another (`Authorization: Bearer token=...`). */
  peerToken(): string;
  /** Leaves the cluster (its jobs go to the others at once); the last thing before the database closes. */
  close(): Promise<void>;
}

/** What nodes tell each other: a cache gone stale (`*_changed`), work for the node that runs a job. */
export type Topic = "deployments_changed" | "catalog_changed" | "deltas_changed" | "device_gate_changed" | "test_run_queued" | "test_run_changed" | "device_event" | "device_control";

/** Another node as this one reaches it. */
export interface PeerNode {
  name: string;
  /** Its `cluster.advertise_url` (empty: it set none, and cannot be reached). */
  url: string;
}

/** The user of the tokens nodes call each other with. */
export const PEER_USER = "labgate-node";

/** The node's name: the configured one, else the host name (cut to what the config accepts). */
export function nodeNameOf(configured: string): string {
  if (configured) return configured;
  const host = hostname().replace(/[^A-Za-z0-9._-]/g, "-").replace(/^[^A-Za-z0-9]+/, "");
  return host.slice(0, 63) || "labgate";
}

/** The one node of the embedded database: it runs every job, and no other node changes anything. */
export function singleNode(name: string, advertiseUrl: string): Cluster {
  return {
    name,
    runs: () => true,
    onTaken: () => {},
    publish: () => {},
    on: () => {},
    nodes: async (localDevices) => [{ name, advertise_url: advertiseUrl, state: "up", connected_devices: localDevices, jobs: [...JOBS] }],
    deviceConnected: () => {},
    deviceDisconnected: () => {},
    locate: () => undefined,
    onNodeLost: () => {},
    peerToken: () => "",
    close: async () => {},
  };
}
