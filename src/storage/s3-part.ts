/*
 * What only an S3 store needs, as one part (src/storage/parts.ts): the build makes it a bundle of
 * its own, so that a gateway on local storage neither loads nor holds the S3 client.
 */
export { openS3Objects, S3Objects } from "./s3.ts";
