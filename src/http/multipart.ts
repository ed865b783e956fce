import { pipeline } from "node:stream/promises";
import type { Readable } from "node:stream";
import busboy from "busboy";
import type { Context } from "hono";
import { LabgateError } from "../util/errors.ts";
import { requestBodyStream } from "./body.ts";
import { inputProblem } from "./errors.ts";

/** Where a form's file part goes (a staged package, a pending config), and how to undo it. */
export interface FilePart<T> {
  /** The form field that carries the file; other file parts are drained. */
  field: string;
  /**
   * Receives the first part named `field` as a stream. Throwing refuses the part: it is drained
   * and the request fails with that error once the form is read. A rejection ends the request
   * at once (a receiver that stopped reading would stall the parser).
   */
  receive(stream: Readable, filename: string): Promise<T>;
  /** Undoes what `receive` made when the request fails after it. */
  discard(received: T): Promise<void>;
}

export interface MultipartOptions<T> {
  file: FilePart<T>;
  /** busboy's limits, plus the bytes all text fields may have together. */
  limits: busboy.Limits & { fieldSize: number; fields: number; fieldsTotal: number };
  /** The texts of the errors, which each API words its own way. */
  texts: {
    /** The body is not multipart/form-data. */
    notMultipart: string;
    /** The form is malformed (followed by what busboy saw). */
    malformed: string;
    /** The body stopped before the form ended (followed by why). */
    interrupted: string;
  };
}

export interface MultipartForm<T> {
  /** Text fields, the first value of each name. */
  fields: Map<string, string>;
  /** What `receive` made of the file part; absent when the form had none. */
  file?: T;
}

/**
 * Reads a `multipart/form-data` request as a stream (busboy): text fields into a map, the file
 * part handed to its receiver while it arrives; nothing is buffered whole. Whatever fails (a
 * malformed form, a client that leaves, a full disk, a refused field) the receiver's work is
 * undone before the error reaches the client, so a refused upload changes nothing.
 */
export async function readMultipart<T>(c: Context, options: MultipartOptions<T>): Promise<MultipartForm<T>> {
  const { file: part, limits, texts } = options;
  const { fieldsTotal, ...busboyLimits } = limits;
  const contentType = c.req.header("content-type") ?? "";
  if (!/^multipart\/form-data\b/i.test(contentType)) throw new LabgateError("invalid", texts.notMultipart);
  const fields = new Map<string, string>();
  const source = requestBodyStream(c);
  if (!source) return { fields };

  let parser: busboy.Busboy;
  try {
    parser = busboy({ headers: { "content-type": contentType }, limits: busboyLimits, defParamCharset: "utf8" });
  } catch (error) {
    throw new LabgateError("invalid", `${texts.malformed}: ${inputProblem(error)}`);
  }

  let receiving: Promise<T> | undefined;
  let receiverError: unknown;
  let refusal: unknown;
  let parseError: unknown;
  let receiverFailed: (error: unknown) => void = () => undefined;
  const receiverFailure = new Promise<never>((_, reject) => (receiverFailed = reject));
  receiverFailure.catch(() => undefined); // raced below

  // Nothing in these callbacks may throw: an exception inside busboy's emitter ends the process.
  let fieldBytes = 0;
  const refuse = (message: string) => void (refusal ??= new LabgateError("invalid", message));
  parser.on("field", (name: string | undefined, value: string, info) => {
    if (typeof name !== "string" || name === "") return refuse("a form field has no name");
    fieldBytes += Buffer.byteLength(name) + Buffer.byteLength(value);
    if (info.valueTruncated || info.nameTruncated) refuse(`form field ${JSON.stringify(name.slice(0, 64))} is too long (limit ${limits.fieldSize} bytes)`);
    else if (fieldBytes > fieldsTotal) refuse(`form fields are larger than ${fieldsTotal} bytes in total`);
    else if (!fields.has(name)) fields.set(name, value);
  });
  // busboy drops fields past the limit silently; a form must not lose fields without a word.
  parser.on("fieldsLimit", () => refuse(`too many form fields (limit ${limits.fields})`));
  parser.on("file", (name, stream, info) => {
    // A truncated form errors the part stream, possibly before anyone reads it; the receiver sees it.
    stream.on("error", () => undefined);
    if (name !== part.field || receiving || refusal) return void stream.resume();
    try {
      receiving = part.receive(stream, info.filename ?? "");
    } catch (error) {
      refusal ??= error;
      return void stream.resume();
    }
    receiving.catch((error: unknown) => receiverFailed((receiverError = error)));
  });
  parser.on("error", (error) => (parseError ??= error));

  const form = pipeline(source, parser);
  form.catch(() => undefined); // raced below
  try {
    try {
      await Promise.race([form, receiverFailure]);
    } catch (error) {
      // busboy errors the file part too: a malformed form is reported as such, whoever noticed first.
      if (parseError) throw new LabgateError("invalid", `${texts.malformed}: ${inputProblem(parseError)}`);
      const bodyCut = source.destroyed && !source.readableEnded;
      if (error !== receiverError || bodyCut) throw new LabgateError("invalid", `${texts.interrupted}: ${inputProblem(error)}`);
      // The receiver gave up before the form ended (too large, disk full). It no longer reads its
      // part, which stalls busboy: drop the rest of the body and answer now.
      source.unpipe(parser);
      source.resume();
      throw error;
    }
    const file = receiving ? await receiving : undefined;
    if (refusal) throw refusal;
    return { fields, file };
  } catch (error) {
    if (receiving) await receiving.then((received) => part.discard(received), () => undefined);
    throw error;
  }
}
