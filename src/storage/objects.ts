/*
 * The object store behind packages and test-run files: one interface, two drivers (the local
 * directory, ./local.ts, and an S3-compatible bucket, ./s3.ts, loaded only when configured).
 * Keys are `/`-separated names made by labgate (a package's `<directory>/<uuid>`, a run's
 * `.testrun/...`), never a client's path as it came.
 */
import type { Readable } from "node:stream";

export type StorageDriver = "local" | "s3";

export interface ObjectInfo {
  size: number;
  modified: Date;
}

export interface ObjectListing extends ObjectInfo {
  key: string;
}

/** What a read passes on from an HTTP request: its byte range and validators (the store answers them). */
export interface ReadRequest {
  range?: string;
  ifNoneMatch?: string;
  ifRange?: string;
  /** Only the head: no body is read. */
  head?: boolean;
}

/** An object read: the status to answer (200, 206, 304 or 416), its head and, for 200 and 206, its bytes. */
export interface ObjectRead {
  status: 200 | 206 | 304 | 416;
  /** The whole object's size. */
  size: number;
  etag: string;
  modified: Date;
  /** Bytes start..end (inclusive) of a 206. */
  range?: { start: number; end: number };
  body?: Readable;
}

export interface ObjectStore {
  readonly driver: StorageDriver;
  /** Writes `source` under `key` (replacing what was there) with flat memory; resolves with the bytes written once the object is durable. */
  put(key: string, source: Readable): Promise<number>;
  /** Moves a complete local file in under `key`: afterwards the file is gone (the local driver renames it). */
  putFile(key: string, path: string): Promise<void>;
  /** The object, or a part of it as `request` asks; undefined when there is none. */
  read(key: string, request?: ReadRequest): Promise<ObjectRead | undefined>;
  stat(key: string): Promise<ObjectInfo | undefined>;
  /** Removes the object; a missing one is fine (the goal is that it is gone). */
  delete(key: string): Promise<void>;
  /** Every object whose key starts with `prefix`, by key. */
  list(prefix: string): Promise<ObjectListing[]>;
  /** A link that downloads the object from the store itself for `ttlSeconds`, or undefined when labgate serves the bytes (the local driver, S3 in proxy mode). */
  presign(key: string, ttlSeconds: number, filename?: string): Promise<string | undefined>;
}

/** Where test-run reports and artifacts live in a shared store: a name no package directory can take (its segments never start with a dot). */
export const TESTRUN_PREFIX = ".testrun/";
