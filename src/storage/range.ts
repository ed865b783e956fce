/** Byte ranges and validators of stored objects, for every file answer (./send.ts) and the drivers. */

export type ByteRange = { start: number; end: number } | "unsatisfiable" | undefined;

/**
 * Parses a single `bytes=` range against `size`. Undefined means "serve the whole object"
 * (no header, another unit, several ranges or garbage: RFC 9110 lets a server ignore those).
 * An empty object is always served whole: the reference device client sends `bytes=0-` on
 * every download and needs a 200 or 206, and no range of zero bytes can be satisfied.
 */
export function parseRange(header: string | undefined, size: number): ByteRange {
  if (!header || size === 0) return undefined;
  const match = /^\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*$/i.exec(header);
  if (!match || (match[1] === "" && match[2] === "")) return undefined;
  if (match[1] === "") {
    const suffix = Number(match[2]);
    if (suffix === 0) return "unsatisfiable";
    return { start: Math.max(0, size - suffix), end: size - 1 };
  }
  const start = Number(match[1]);
  const end = match[2] === "" ? size - 1 : Math.min(Number(match[2]), size - 1);
  if (match[2] !== "" && Number(match[2]) < start) return undefined;
  if (start >= size) return "unsatisfiable";
  return { start, end };
}

/**
 * The validator of an object's bytes: objects are written whole and replaced, never changed in
 * place, so size and modification time make a strong one. `variant` tells apart another form of
 * the same object (a report's JSON).
 */
export function fileEtag(size: number, modified: Date, variant = ""): string {
  return `"${size.toString(16)}-${Math.floor(modified.getTime()).toString(16)}${variant}"`;
}

