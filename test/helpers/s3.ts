/*
 * An S3-compatible server on loopback for the storage tests: @20minutes/s3rver, which checks
 * Signature V4 on every request and presigned URL (its account S3RVER / S3RVER), keeping its
 * objects in a temp dir.
 */
import S3rver from "@20minutes/s3rver";
import type { Config } from "../../src/config/config.ts";
import { tempDir } from "./server.ts";

export interface TestS3 {
  endpoint: string;
  bucket: string;
  /** `storage.s3` for a server that uses this store. */
  settings: Config["storage"]["s3"];
  stop(): Promise<void>;
}

/** Starts the store (again, with the `port` and `directory` of one that stopped). */
export async function startS3(bucket = "labgate", at: { port?: number; directory?: string } = {}): Promise<TestS3 & { port: number; directory: string }> {
  const directory = at.directory ?? tempDir("labgate-s3-");
  const server = new S3rver({ address: "127.0.0.1", port: at.port ?? 0, silent: true, directory, configureBuckets: [{ name: bucket }] });
  const { port } = await server.run();
  const endpoint = `http://127.0.0.1:${port}`;
  return {
    endpoint,
    bucket,
    port,
    directory,
    settings: { endpoint, region: "us-east-1", bucket, access_key_id: "S3RVER", secret_access_key: "S3RVER", path_style: true, proxy: false },
    stop: () => server.close(),
  };
}
