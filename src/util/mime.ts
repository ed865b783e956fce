/**
 * mime-types, loaded on first use: building its tables from mime-db is a noticeable part of a
 * server's start, and only file answers and the console's files need them.
 * test/foundation/start.test.ts keeps every other import of it out of src/.
 */
type MimeTypes = typeof import("mime-types");

let loaded: Promise<MimeTypes> | undefined;

export function mimeTypes(): Promise<MimeTypes> {
  loaded ??= import("mime-types").then((module) => ((module as { default?: MimeTypes }).default ?? module) as MimeTypes);
  return loaded;
}
