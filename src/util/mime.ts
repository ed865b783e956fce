/**
 * The Content-Type for a file name, application/octet-stream when unknown. mime-types is loaded on
 * the first call: its table (mime-db, about 200 KB of JSON turned into maps) is not needed to start
 * the server (issue 31).
 */
let mimeTypes: Promise<typeof import("mime-types")> | undefined;

export async function contentTypeOf(name: string): Promise<string> {
  const { contentType } = await (mimeTypes ??= import("mime-types"));
  return contentType(name) || "application/octet-stream";
}
