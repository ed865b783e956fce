/**
 * A FormData as a multipart/form-data body (RFC 7578, as browsers and Node's fetch send it), the
 * parts streamed: a file's bytes are read only as the body is.
 */
import { randomBytes } from "node:crypto";
import type { ReadableStream as WebReadableStream } from "node:stream/web";

/** Quotes a name or file name as the HTML standard does (", CR and LF percent-encoded). */
const quoted = (text: string) => `"${text.replace(/"/g, "%22").replace(/\r/g, "%0D").replace(/\n/g, "%0A")}"`;

export function formDataBody(form: FormData): { stream: WebReadableStream<Uint8Array>; type: string } {
  const boundary = `----labgate${randomBytes(12).toString("hex")}`;
  const entries = [...form.entries()];
  let next = 0;
  const encoder = new TextEncoder();
  const stream = new (globalThis.ReadableStream as unknown as typeof WebReadableStream<Uint8Array>)({
    async pull(controller) {
      if (next === entries.length) {
        controller.enqueue(encoder.encode(`--${boundary}--\r\n`));
        controller.close();
        return;
      }
      const [name, value] = entries[next++]!;
      if (typeof value === "string") {
        controller.enqueue(encoder.encode(`--${boundary}\r\nContent-Disposition: form-data; name=${quoted(name)}\r\n\r\n${value.replace(/\r(?!\n)|(?<!\r)\n/g, "\r\n")}\r\n`));
        return;
      }
      const file = value as File;
      controller.enqueue(encoder.encode(`--${boundary}\r\nContent-Disposition: form-data; name=${quoted(name)}; filename=${quoted(file.name ?? "blob")}\r\nContent-Type: ${file.type || "application/octet-stream"}\r\n\r\n`));
      for await (const chunk of file.stream() as unknown as AsyncIterable<Uint8Array>) controller.enqueue(chunk);
      controller.enqueue(encoder.encode("\r\n"));
    },
  });
  return { stream, type: `multipart/form-data; boundary=${boundary}` };
}
