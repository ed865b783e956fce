/*
 * The S3 driver as a part that a build makes a bundle of its own (build/build.sh), loaded only
 * with `storage.driver: s3`; from source a plain import. As PostgreSQL's part (src/db/parts.ts).
 */
import { S3_BUNDLE } from "../launch/bundles.ts";
import { loadBundle } from "../launch/lazy-bundle.ts";

/** Defined (true) in the CLI's bundle: esbuild then leaves the import below out. */
declare const LABGATE_MAIN_BUNDLE: true | undefined;

export const loadS3Part = (): Promise<typeof import("./s3-part.ts")> =>
  typeof LABGATE_MAIN_BUNDLE === "undefined" ? import("./s3-part.ts") : Promise.resolve().then(() => loadBundle(S3_BUNDLE) as typeof import("./s3-part.ts"));
