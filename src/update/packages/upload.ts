import { pipeline } from "node:stream/promises";
import busboy from "busboy";
import type { Context } from "hono";
import { requestBodyStream } from "../../http/body.ts";
import { inputProblem } from "../../http/errors.ts";
import { LabgateError } from "../../util/errors.ts";
import type { LocalStorage, StagedObject } from "../../storage/local.ts";

export interface ParsedUpload {
  /** Text fields, first value of each name wins (update-server.md 4.3). */
  fields: Map<string, string>;
  /** The `file` part, streamed into the storage's temp area; absent when the form had none. */
  staged?: StagedObject;
}

const FIELD_LIMIT = 64 * 1024;
const FIELD_COUNT_LIMIT = 1000;
/** All text fields together become the package's metadata: bound what one upload can store. */
const FIELDS_TOTAL_LIMIT = 1024 * 1024;

/**
 * Parses a `multipart/form-data` upload as a stream (busboy): the `file` part goes straight
 * into the storage driver's temp area while being hashed; nothing is buffered whole. On any
 * failure (malformed form, client abort, disk error) the staged file is removed.
 */
export async function parseUpload(c: Context, storage: LocalStorage, fileField = "file"): Promise<ParsedUpload> {
  const contentType = c.req.header("content-type") ?? "";
  if (!/^multipart\/form-data\b/i.test(contentType)) throw new LabgateError("invalid", "expected a multipart/form-data body");
  const source = requestBodyStream(c);
  if (!source) throw new LabgateError("invalid", "missing package file");

  let parser: busboy.Busboy;
  try {
    parser = busboy({ headers: { "content-type": contentType }, limits: { fieldSize: FIELD_LIMIT, fields: FIELD_COUNT_LIMIT, fieldNameSize: 1024 }, defParamCharset: "utf8" });
  } catch (error) {
    throw new LabgateError("invalid", `malformed multipart/form-data: ${inputProblem(error)}`);
  }

  const fields = new Map<string, string>();
  let staging: Promise<StagedObject> | undefined;
  let fieldError: string | undefined;
  let fieldBytes = 0;
  // Nothing in these callbacks may throw: an exception inside busboy's emitter ends the process.
  parser.on("field", (name: string | undefined, value: string, info) => {
    if (typeof name !== "string" || name === "") return void (fieldError ??= "a form field has no name");
    fieldBytes += Buffer.byteLength(name) + Buffer.byteLength(value);
    if (info.valueTruncated || info.nameTruncated) fieldError ??= `form field ${JSON.stringify(name.slice(0, 64))} is too long (limit ${FIELD_LIMIT} bytes)`;
    else if (fieldBytes > FIELDS_TOTAL_LIMIT) fieldError ??= `form fields are larger than ${FIELDS_TOTAL_LIMIT} bytes in total`;
    else if (!fields.has(name)) fields.set(name, value);
  });
  // busboy drops fields past the limit silently; metadata must not lose keys without a word.
  parser.on("fieldsLimit", () => (fieldError ??= `too many form fields (limit ${FIELD_COUNT_LIMIT})`));
  parser.on("file", (name, stream) => {
    // A truncated form errors the part stream, possibly before anyone reads it; staging sees it.
    stream.on("error", () => undefined);
    if (name === fileField && !staging) {
      staging = storage.stage(stream);
      staging.catch(() => {}); // awaited below; avoid an unhandled rejection meanwhile
    } else {
      stream.resume(); // other file parts are not part of the API: drain them
    }
  });

  try {
    await pipeline(source, parser);
  } catch (error) {
    // Make sure the file part stops and its temp file is gone before answering.
    if (staging) await staging.then((s) => storage.discard(s), () => {});
    throw new LabgateError("invalid", `upload failed: ${inputProblem(error)}`);
  }
  let staged: StagedObject | undefined;
  try {
    staged = staging ? await staging : undefined;
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "ENOSPC" || code === "EDQUOT") throw new LabgateError("no_space", "could not store package: no space left in the data dir");
    if (code === "EIO" || code === "EROFS" || code === "EACCES") throw new LabgateError("internal", `could not store package: ${code}`);
    throw new LabgateError("invalid", `upload failed: ${inputProblem(error)}`);
  }
  if (fieldError) {
    if (staged) await storage.discard(staged);
    throw new LabgateError("invalid", fieldError);
  }
  return { fields, staged };
}
