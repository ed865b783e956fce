/** The one way the console talks to the server: JSON in and out, errors as ApiError with the server's message. */

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    /** The request's field the server names (dotted path, "metadata.name"), when it names one. */
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
    const body = (await res.json()) as { error?: unknown; field?: unknown; details?: { field?: unknown } };
    if (typeof body.error === "string" && body.error) message = body.error;
    const named = body.field ?? body.details?.field;
    if (typeof named === "string" && named) field = named;
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

/** GET (or another method) answering JSON; 204 and empty bodies give undefined. */
export async function api<T>(method: string, path: string, options?: CallOptions): Promise<T> {
  const res = await call(method, path, options);
  const text = await res.text();
  return (text.trim() ? JSON.parse(text) : undefined) as T;
}

export const get = <T>(path: string) => api<T>("GET", path);

/** A page of a list route that answers X-Total-Count. */
export async function getPage<T>(path: string): Promise<{ items: T[]; total: number }> {
  const res = await call("GET", path);
  const items = (await res.json()) as T[];
  return { items, total: Number(res.headers.get("x-total-count") ?? items.length) };
}

/** A multipart upload with progress (fetch has no upload progress; XHR does). */
export function upload<T>(path: string, form: FormData, onProgress: (fraction: number) => void): { done: Promise<T>; abort: () => void } {
  const xhr = new XMLHttpRequest();
  const done = new Promise<T>((resolve, reject) => {
    xhr.open("POST", path);
    xhr.upload.onprogress = (e) => {
      if (e.lengthComputable) onProgress(e.loaded / e.total);
    };
    xhr.onload = () => {
      let body: { error?: string } | undefined;
      try {
        body = JSON.parse(xhr.responseText);
      } catch {
        body = undefined;
      }
      if (xhr.status >= 200 && xhr.status < 300) return resolve(body as T);
      if (xhr.status === 401) onSignedOut();
      reject(new ApiError(xhr.status, body?.error ?? `${xhr.status} ${xhr.statusText}`));
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
