/**
 * The shapes of fetching a file from a device, each once: devicefiles/routes.ts registers them
 * with the routes (the OpenAPI document shows them) and the handlers parse and answer with them.
 */
import * as z from "zod";
import { strictBody, zRequiredString } from "../../util/shapes.ts";

/** The body of fs/file: an absolute path on the device. */
export const FileRequest = strictBody({
  file: zRequiredString("file", 4096).startsWith("/", { error: 'schema validation failed: field "file" must be an absolute path' }),
});

/** What became of a fetch: 0 and a signed link to the file, or 1 and "" (the device has no such file, or the upload failed). */
export const FetchedFile = z.object({ status: z.union([z.literal(0), z.literal(1)]), url: z.string() }).meta({ id: "FetchedFile" });
export type FetchedFile = z.infer<typeof FetchedFile>;

/** POST /api/v1/cluster/files: a fetch asked on another node, for a device whose socket is on this one. */
export const PeerFetch = z.strictObject({
  device: z.int(),
  file: z.string().min(1).max(4096),
  actor: z.object({ kind: z.enum(["account", "token", "anonymous"]), name: z.string().max(256), tokenId: z.string().max(256).nullable(), client: z.string().max(256) }),
});
export type PeerFetch = z.infer<typeof PeerFetch>;
