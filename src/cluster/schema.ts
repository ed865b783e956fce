/** The cluster API's shapes (`GET /api/v1/cluster`); the console imports the types. */
import * as z from "zod";
import { JOBS } from "./cluster.ts";

export const ClusterNode = z
  .object({
    name: z.string().describe("cluster.node_name, else the host name"),
    advertise_url: z.string().describe("how the other nodes reach it (cluster.advertise_url); empty: not set"),
    state: z.enum(["up", "down", "stopped"]).describe("up: it beat within the last 8 s; down: it stopped beating; stopped: it shut down"),
    connected_devices: z.int().describe("device sockets it holds"),
    jobs: z.array(z.enum(JOBS)).describe("the jobs it runs now (each runs on one node at a time)"),
  })
  .meta({ id: "ClusterNode" });
export type ClusterNode = z.infer<typeof ClusterNode>;

export const ClusterView = z.object({ nodes: z.array(ClusterNode) }).meta({ id: "ClusterView" });
export type ClusterView = z.infer<typeof ClusterView>;

export const ClusterKeys = z
  .object({
    files: z
      .object({ "mgmt-ed25519.key": z.string().describe("the management tokens' Ed25519 key (base64)"), "hmac.secret": z.string().describe("the device tokens' and links' HMAC secret (base64)") })
      .describe("keys/ of the node's data dir, by file name"),
  })
  .meta({ id: "ClusterKeys" });
export type ClusterKeys = z.infer<typeof ClusterKeys>;
