/**
 * The one way the console talks to the server: JSON in and out, errors as ApiError with the
 * server's message. `api.get("/api/v2/devices/:id{[0-9]+}", { id })` takes a route's path as the
 * server registers it, fills its parameters (the rest go into the query) and answers the type of
 * that operation's reply, from the server's registry (src/server/api.ts, types only).
 */
import type { BodyAt, Method, OperationAt, PathParams, QueryAt, ReplyAt } from "../../http/openapi.ts";
import type { Api } from "../../server/api.ts";

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    /** The request field the error is about (a dotted path, "metadata.name"), when the server names one. */
    readonly field?: string,
  ) {
    super(message);
  }
}

/** A refusal as a form shows it: beside `field` when it names one, else at the form's foot. */
export interface FieldError {
  field: string | undefined;
  /** What to show beside the field: the message without the field's name. */
  text: string;
  /** What to show elsewhere: the whole message without the validation prefix. */
  message: string;
}

const PREFIX = /^schema validation failed:\s*/;
/** `field "metadata.name" must be…`, `"priority" must be…`, `name: 1 to 64…`: the field, then the rest. */
const NAMED = /^(?:field\s+"([^"]+)"\s*|"([^"]+)"\s+|([A-Za-z_][\w.]*):\s+)(.*)$/s;

/**
 * Where an error belongs in a form, and its text without the validation prefix: the field the
 * server's error names (its `field`), else the one its message starts with (servers that name none).
 */
export function fieldErrorOf(error: unknown): FieldError {
  const message = messageOf(error).replace(PREFIX, "");
  const named = NAMED.exec(message);
  const field = error instanceof ApiError && error.field ? error.field : named ? (named[1] ?? named[2] ?? named[3]) : undefined;
  // The rest of the message reads beside the field it names; said of another field, it keeps its name.
  const text = named && field === (named[1] ?? named[2] ?? named[3]) ? named[4] : message;
  return { field, text, message };
}

/** Called when the session is gone: the app shows the login form again. */
let onSignedOut: () => void = () => {};
export const setSignedOutHandler = (handler: () => void) => {
  onSignedOut = handler;
};

async function errorOf(res: Response): Promise<ApiError> {
  let message = `${res.status} ${res.statusText}`;
  let field: string | undefined;
  try {
    const body = (await res.json()) as { error?: unknown; field?: unknown };
    if (typeof body.error === "string" && body.error) message = body.error;
    if (typeof body.field === "string" && body.field) field = body.field;
  } catch {
    // Not JSON: keep the status line.
  }
  return new ApiError(res.status, message, field);
}

export interface CallOptions {
  /** A JSON body. */
  json?: unknown;
  /** Another body (FormData, text); sent as it is. */
  body?: BodyInit;
  /** Don't treat 401 as the end of the session (the login form itself). */
  quiet401?: boolean;
}

/** Calls the API; resolves the response on 2xx, else throws ApiError. */
export async function call(method: string, path: string, options: CallOptions = {}): Promise<Response> {
  const headers: Record<string, string> = {};
  let body = options.body;
  if (options.json !== undefined) {
    headers["content-type"] = "application/json";
    body = JSON.stringify(options.json);
  }
  let res: Response;
  try {
    res = await fetch(path, { method, headers, body, credentials: "same-origin" });
  } catch {
    throw new ApiError(0, "the server cannot be reached");
  }
  if (res.ok) return res;
  const error = await errorOf(res);
  if (res.status === 401 && !options.quiet401) onSignedOut();
  throw error;
}

/** A call answering JSON; 204 and empty bodies give undefined. */
async function json<T>(method: string, path: string, options?: CallOptions): Promise<T> {
  const res = await call(method, path, options);
  const text = await res.text();
  return (text.trim() ? JSON.parse(text) : undefined) as T;
}

type PathOf<M extends Method> = Extract<Api, { method: M }>["path"];
/** A path's parameters and its query's, in one object. */
type Params<M extends Method, P extends string> = PathParams<P> & QueryAt<OperationAt<Api, M, P>>;
type Reply<M extends Method, P extends string> = ReplyAt<OperationAt<Api, M, P>>;
/** The parameters, which may be left out when none is required. */
type ParamArgs<M extends Method, P extends string, Rest extends unknown[] = []> = {} extends Params<M, P> ? [params?: Params<M, P>, ...Rest] : [params: Params<M, P>, ...Rest];

/** `path` (a route's, `/api/v2/devices/:id{[0-9]+}`) with its parameters filled in; the other params go into the query. */
export function pathOf(path: string, params: object = {}): string {
  const rest: Record<string, unknown> = { ...params };
  const filled = path.replace(/:([A-Za-z_]+)(\{[^}]*\})?/g, (_m, name: string) => {
    const value = rest[name];
    delete rest[name];
    return encodeURIComponent(String(value));
  });
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(rest)) if (value !== undefined) query.set(key, String(value));
  return query.size > 0 ? `${filled}?${query}` : filled;
}

const read =
  <M extends Method>(method: M) =>
  <P extends PathOf<M>>(path: P, ...[params, options]: ParamArgs<M, P, [options?: CallOptions]>) =>
    json<Reply<M, P>>(method.toUpperCase(), pathOf(path, params), options);
const write =
  <M extends Method>(method: M) =>
  <P extends PathOf<M>>(path: P, ...[params, body, options]: ParamArgs<M, P, [body?: BodyAt<OperationAt<Api, M, P>>, options?: CallOptions]>) =>
    json<Reply<M, P>>(method.toUpperCase(), pathOf(path, params), { ...options, json: body });

/** The API by method: `api.get(path, params?)`, `api.post(path, params?, body?)`; each answers its operation's reply. */
export const api = {
  get: read("get"),
  delete: write("delete"),
  post: write("post"),
  put: write("put"),
  patch: write("patch"),
  /** A page of a list route that answers X-Total-Count. */
  async page<P extends PathOf<"get">>(path: P, ...[params]: ParamArgs<"get", P>): Promise<{ items: Reply<"get", P>; total: number }> {
    const res = await call("GET", pathOf(path, params));
    const items = (await res.json()) as Reply<"get", P>;
    return { items, total: Number(res.headers.get("x-total-count") ?? (items as unknown[]).length) };
  },
};

/** A multipart upload with progress (fetch has no upload progress; XHR does). */
export function upload<P extends PathOf<"post">>(path: P, form: FormData, onProgress: (fraction: number) => void): { done: Promise<Reply<"post", P>>; abort: () => void } {
  type T = Reply<"post", P>;
  const xhr = new XMLHttpRequest();
  const done = new Promise<T>((resolve, reject) => {
    xhr.open("POST", path);
    xhr.upload.onprogress = (e) => {
      if (e.lengthComputable) onProgress(e.loaded / e.total);
    };
    xhr.onload = () => {
      let body: { error?: string; field?: string } | undefined;
      try {
        body = JSON.parse(xhr.responseText);
      } catch {
        body = undefined;
      }
      if (xhr.status >= 200 && xhr.status < 300) return resolve(body as T);
      if (xhr.status === 401) onSignedOut();
      reject(new ApiError(xhr.status, body?.error ?? `${xhr.status} ${xhr.statusText}`, body?.field));
    };
    xhr.onerror = () => reject(new ApiError(0, "the upload failed: the server cannot be reached"));
    xhr.onabort = () => reject(new ApiError(0, "the upload was cancelled"));
    xhr.send(form);
  });
  return { done, abort: () => xhr.abort() };
}

export const messageOf = (error: unknown): string => (error instanceof Error ? error.message : String(error));

/** Path segment encoding. */
export const seg = (value: string | number) => encodeURIComponent(String(value));
