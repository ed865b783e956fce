import { join } from "node:path";
import type { Config } from "../config/config.ts";
import { ConfigError } from "../config/read.ts";
import { LabgateError } from "../util/errors.ts";
import { LocalStorage } from "./local.ts";
import type { ObjectStore } from "./objects.ts";
import { loadS3Part } from "./parts.ts";
import { nodeNameOf } from "../cluster/cluster.ts";

/** `storage.local.dir`, or its default under the data dir. */
export const localStorageDir = (config: Config): string => config.storage.local.dir || join(config.data_dir, "storage");

/**
 * The configured object store: the local directory, or the S3 bucket (its client loaded only
 * then). A bucket that does not exist or credentials the store refuses stop the start
 * (ConfigError, exit 2); a store that cannot be reached only warns.
 */
export async function openObjectStore(config: Config, warn: (message: string) => void): Promise<ObjectStore> {
  // On PostgreSQL several nodes may share the directory: each stages its uploads in a temp area of its own.
  if (config.storage.driver === "local") return new LocalStorage(localStorageDir(config), config.database.url ? nodeNameOf(config.cluster.node_name) : undefined);
  const { openS3Objects } = await loadS3Part();
  return openS3Objects(config.storage.s3, { config: (message) => new ConfigError(message), unavailable: (message) => new LabgateError("unavailable", message) }, warn);
}
