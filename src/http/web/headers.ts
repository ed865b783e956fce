/**
 * The Fetch standard's Headers, as hono and @hono/node-server use it (src/http/web/install.ts says
 * why labgate has its own). Names are kept in lower case; `get` joins a name's values with ", ",
 * iteration is sorted by name and gives each Set-Cookie on its own.
 */
/** An HTTP token (RFC 9110): a header name, a method. */
export const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const INVALID_VALUE = /[\0\r\n]/;
const EDGE_WHITESPACE = /^[\t\n\r ]+|[\t\n\r ]+$/g;

function headerName(name: string): string {
  const text = String(name);
  if (!TOKEN.test(text)) throw new TypeError(`Headers: invalid header name ${JSON.stringify(text)}`);
  return text.toLowerCase();
}

function headerValue(value: string): string {
  const text = String(value).replace(EDGE_WHITESPACE, "");
  if (INVALID_VALUE.test(text)) throw new TypeError("Headers: invalid header value");
  return text;
}

export type HeadersInit = Headers | Iterable<readonly [string, string]> | Iterable<string[]> | Record<string, string | readonly string[]>;

export class Headers {
  /** lower-case name -> its values in the order given */
  #map = new Map<string, string[]>();
  #sorted: Array<[string, string]> | undefined;

  constructor(init?: HeadersInit | null) {
    if (init == null) return;
    if (typeof init !== "object") throw new TypeError("Headers: the init must be an object");
    if (Symbol.iterator in init) {
      for (const pair of init as Iterable<readonly string[]>) {
        if (pair.length !== 2) throw new TypeError("Headers: each header pair must have a name and a value");
        this.append(pair[0]!, pair[1]!);
      }
    } else {
      for (const [name, value] of Object.entries(init as Record<string, string | readonly string[]>)) {
        // Node's IncomingHttpHeaders give repeated Set-Cookie as an array.
        if (Array.isArray(value)) for (const one of value) this.append(name, one);
        else this.append(name, value as string);
      }
    }
  }

  append(name: string, value: string): void {
    const key = headerName(name);
    const text = headerValue(value);
    const values = this.#map.get(key);
    if (values) values.push(text);
    else this.#map.set(key, [text]);
    this.#sorted = undefined;
  }

  set(name: string, value: string): void {
    this.#map.set(headerName(name), [headerValue(value)]);
    this.#sorted = undefined;
  }

  delete(name: string): void {
    if (this.#map.delete(headerName(name))) this.#sorted = undefined;
  }

  get(name: string): string | null {
    const values = this.#map.get(headerName(name));
    if (!values) return null;
    return values.length === 1 ? values[0]! : values.join(", ");
  }

  has(name: string): boolean {
    return this.#map.has(headerName(name));
  }

  getSetCookie(): string[] {
    return [...(this.#map.get("set-cookie") ?? [])];
  }

  forEach(callback: (value: string, name: string, headers: Headers) => void, thisArg?: unknown): void {
    for (const [name, value] of this.#list()) callback.call(thisArg, value, name, this);
  }

  *keys(): IterableIterator<string> {
    for (const [name] of this.#list()) yield name;
  }

  *values(): IterableIterator<string> {
    for (const [, value] of this.#list()) yield value;
  }

  *entries(): IterableIterator<[string, string]> {
    for (const [name, value] of this.#list()) yield [name, value];
  }

  [Symbol.iterator](): IterableIterator<[string, string]> {
    return this.entries();
  }

  get [Symbol.toStringTag](): string {
    return "Headers";
  }

  /** The sort-and-combine of the standard, kept until the next change. */
  #list(): Array<[string, string]> {
    if (this.#sorted) return this.#sorted;
    const list: Array<[string, string]> = [];
    for (const name of [...this.#map.keys()].sort()) {
      const values = this.#map.get(name)!;
      if (name === "set-cookie") for (const value of values) list.push([name, value]);
      else list.push([name, values.join(", ")]);
    }
    this.#sorted = list;
    return list;
  }
}
