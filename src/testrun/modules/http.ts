import { request as httpRequest, type IncomingMessage } from "node:http";
import { isDeepStrictEqual } from "node:util";
import { bool, ints, isMapping, list, num, optional, paramSchema, regexError, required, str } from "./params.ts";
import { CaseFailure, fail, pass, type CaseDef, type EntryContext, type ModuleDef } from "./types.ts";

const BODY_LIMIT = 1024 * 1024;

interface HttpResult {
  status: number;
  body: string;
  ms: number;
}

function send(ctx: EntryContext): Promise<HttpResult> {
  const p = ctx.params;
  const url = new URL(str(p, "url")!);
  const timeoutMs = num(p, "timeout", 10)! * 1000;
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries((p.headers as Record<string, unknown>) ?? {})) headers[k] = String(v);
  let body: string | undefined;
  if (typeof p.body === "string") body = p.body;
  else if (p.body !== undefined && p.body !== null) {
    body = JSON.stringify(p.body);
    if (!Object.keys(headers).some((k) => k.toLowerCase() === "content-type")) headers["content-type"] = "application/json";
  }
  const started = performance.now();
  // node:https (and tls) loaded with the first https check: agents run this too, and hold them only once they check an https URL.
  const request = url.protocol === "https:" ? process.getBuiltinModule("node:https").request : httpRequest;
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      { method: str(p, "method", "GET")!.toUpperCase(), headers, signal: ctx.signal, timeout: timeoutMs, rejectUnauthorized: bool(p, "tls_verify", true) },
      (res: IncomingMessage) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on("data", (chunk: Buffer) => {
          if (size < BODY_LIMIT) chunks.push(chunk);
          size += chunk.length;
        });
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString("utf8"), ms: performance.now() - started }));
        res.on("error", reject);
      },
    );
    req.on("timeout", () => req.destroy(new Error(`timed out after ${timeoutMs / 1000} s`)));
    req.on("error", reject);
    req.end(body);
  });
}

/**
 * Follows a JSON path through parsed JSON: dotted (`items.0.id`, decimal segments index lists)
 * or, starting with `/`, a JSON Pointer (RFC 6901: `/version.major/0`, `~1` is `/`, `~0` is `~`),
 * which also reaches keys that contain a `.`.
 */
function at(value: unknown, path: string): { found: boolean; value?: unknown } {
  const segments = path.startsWith("/") ? path.slice(1).split("/").map((s) => s.replace(/~1/g, "/").replace(/~0/g, "~")) : path.split(".");
  let node = value;
  for (const segment of segments) {
    if (Array.isArray(node) && /^\d+$/.test(segment) && Number(segment) < node.length) node = node[Number(segment)];
    else if (node !== null && typeof node === "object" && !Array.isArray(node) && Object.hasOwn(node, segment)) node = (node as Record<string, unknown>)[segment];
    else return { found: false };
  }
  return { found: true, value: node };
}

/**
 * The `json` checks as [path, expected] pairs. Two forms: a mapping `path: expected`, whose keys
 * must not contain `.` (in a config file such a key is an in-file override: use a `/` JSON
 * Pointer instead), or a list of `{path, equals}` items, where the path is a value and any form works.
 */
function jsonChecks(value: unknown): Array<[string, unknown]> {
  if (Array.isArray(value)) return value.map((item) => [String((item as Record<string, unknown>).path), (item as Record<string, unknown>).equals ?? null]);
  return isMapping(value) ? Object.entries(value) : [];
}

function jsonParamError(value: unknown): string | undefined {
  if (value === undefined || value === null) return undefined;
  if (isMapping(value)) {
    // Every key had a `.` and was taken as an in-file override: the checks would silently vanish.
    if (Object.keys(value).length === 0) return "parameter 'json': no checks; a key containing '.' is an in-file override (docs/test-run-server.md): write the path as a JSON Pointer (/a/b) or use the list form [{path: a.b, equals: value}]";
    return undefined;
  }
  if (!Array.isArray(value) || value.length === 0) return "parameter 'json': expected a mapping of path to value or a list of {path, equals}";
  for (const [i, item] of value.entries()) {
    if (!isMapping(item) || typeof item.path !== "string" || item.path === "" || !Object.hasOwn(item, "equals")) return `parameter 'json': item ${i} must be {path: <path>, equals: <value>}`;
  }
  return undefined;
}

const result = (ctx: EntryContext) => ctx.state.result as HttpResult;

/** `http`: one HTTP(S) request with checks. */
export const httpModule: ModuleDef = {
  key: "http",
  className: "TestHttp",
  summary: "One HTTP(S) request with checks on status, body, JSON and latency.",
  params: paramSchema(() => ({
    url: required("string", "http or https URL"),
    name: optional("string", "the report's device name", "http(<url>)"),
    method: optional("string", "request method", "GET"),
    headers: optional("mapping", "request headers"),
    body: optional("any", "request body: a string, or a mapping sent as JSON"),
    timeout: optional("number", "seconds", 10),
    expect_status: optional("integers", "accepted status or statuses", 200),
    body_contains: optional("strings", "text the body must contain"),
    body_regex: optional("strings", "regular expressions the body must match"),
    json: optional("any", "JSON checks: a mapping of JSON Pointer to value, or a list of {path, equals}"),
    max_ms: optional("number", "the longest the request may take (adds the `latency` case)"),
    tls_verify: optional("boolean", "verify the server's certificate", true),
  })),
  validate(p) {
    try {
      const url = new URL(String(p.url));
      if (url.protocol !== "http:" && url.protocol !== "https:") return "parameter 'url': expected an http or https URL";
    } catch {
      return "parameter 'url': expected an http or https URL";
    }
    return jsonParamError(p.json) ?? regexError(p, "body_regex");
  },
  deviceName: ({ params }) => str(params, "name") ?? `http(${str(params, "url")})`,
  cases({ params }) {
    const cases: CaseDef[] = [
      {
        name: "status",
        run(ctx) {
          const want = ints(ctx.params, "expect_status", [200]);
          const got = result(ctx).status;
          return want.includes(got) ? pass() : fail(`status ${got}, expected ${want.join(" or ")}`);
        },
      },
    ];
    if (["body_contains", "body_regex", "json"].some((k) => params[k] !== undefined && params[k] !== null))
      cases.push({
        name: "body",
        run(ctx) {
          const body = result(ctx).body;
          for (const needle of list(ctx.params, "body_contains")) if (!body.includes(needle)) return fail(`body does not contain ${JSON.stringify(needle)}`);
          for (const source of list(ctx.params, "body_regex")) if (!new RegExp(source, "m").test(body)) return fail(`body does not match /${source}/`);
          const checks = jsonChecks(ctx.params.json);
          if (checks.length > 0) {
            let parsed: unknown;
            try {
              parsed = JSON.parse(body);
            } catch {
              return fail("body is not JSON");
            }
            for (const [path, expected] of checks) {
              const found = at(parsed, path);
              if (!found.found) return fail(`JSON path ${path} not found`);
              if (!isDeepStrictEqual(found.value, expected)) return fail(`JSON path ${path} is ${JSON.stringify(found.value)}, expected ${JSON.stringify(expected)}`);
            }
          }
          return pass();
        },
      });
    if (num(params, "max_ms") !== undefined)
      cases.push({
        name: "latency",
        run(ctx) {
          const ms = result(ctx).ms;
          const max = num(ctx.params, "max_ms")!;
          return ms <= max ? pass() : fail(`took ${ms.toFixed(1)} ms, more than ${max} ms`);
        },
      });
    return cases;
  },
  async setup(ctx) {
    try {
      ctx.state.result = await send(ctx);
    } catch (error) {
      if (ctx.signal.aborted) throw error;
      const e = error as NodeJS.ErrnoException;
      throw new CaseFailure(`request failed: ${e.code ?? e.message}`);
    }
  },
};
