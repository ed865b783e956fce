/** Shared pieces of every page: loading, errors, messages, confirmation, badges, tables, formatting. */
import type { ComponentChildren } from "preact";
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { messageOf } from "./api.ts";

// ---- messages (toasts) ------------------------------------------------------------------------

export interface Toast {
  id: number;
  kind: "ok" | "error";
  text: string;
}
let toasts: Toast[] = [];
let toastId = 0;
const toastListeners = new Set<(list: Toast[]) => void>();
const setToasts = (list: Toast[]) => {
  toasts = list;
  for (const l of toastListeners) l(list);
};
export const dismiss = (id: number) => setToasts(toasts.filter((t) => t.id !== id));
/** Shows a message at the bottom of the page (errors for 15 s or until closed, others for 4 s). */
export function notify(text: string, kind: Toast["kind"] = "ok") {
  const id = ++toastId;
  setToasts([...toasts.slice(-4), { id, kind, text }]);
  setTimeout(() => dismiss(id), kind === "ok" ? 4000 : 15000);
}

export function Toasts() {
  const [list, setList] = useState(toasts);
  useEffect(() => {
    toastListeners.add(setList);
    return () => void toastListeners.delete(setList);
  }, []);
  return (
    <div class="toasts" role="status" aria-live="polite">
      {list.map((t) => (
        <div key={t.id} class={`toast toast-${t.kind}`} role={t.kind === "error" ? "alert" : undefined}>
          <span>{t.text}</span>
          <button type="button" class="link" aria-label="Close message" onClick={() => dismiss(t.id)}>
            ×
          </button>
        </div>
      ))}
    </div>
  );
}

// ---- confirmation -----------------------------------------------------------------------------

interface Ask {
  title: string;
  body?: ComponentChildren;
  confirm: string;
  danger: boolean;
  resolve: (yes: boolean) => void;
}
let showAsk: (ask: Ask | undefined) => void = () => {};

/** Asks before an action that changes something; resolves true when confirmed. */
export function confirmAction(title: string, options: { body?: ComponentChildren; confirm?: string; danger?: boolean } = {}): Promise<boolean> {
  return new Promise((resolve) => showAsk({ title, body: options.body, confirm: options.confirm ?? "OK", danger: options.danger ?? true, resolve }));
}

export function ConfirmHost() {
  const [ask, setAsk] = useState<Ask | undefined>();
  const dialog = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    showAsk = setAsk;
  }, []);
  useEffect(() => {
    if (ask && dialog.current && !dialog.current.open) dialog.current.showModal();
  }, [ask]);
  const close = (yes: boolean) => {
    ask?.resolve(yes);
    dialog.current?.close();
    setAsk(undefined);
  };
  if (!ask) return null;
  return (
    <dialog ref={dialog} class="confirm" onCancel={() => close(false)} aria-labelledby="confirm-title">
      <h2 id="confirm-title">{ask.title}</h2>
      {ask.body && <div class="confirm-body">{ask.body}</div>}
      <div class="row end">
        <button type="button" onClick={() => close(false)}>
          Cancel
        </button>
        <button type="button" class={ask.danger ? "danger" : "primary"} onClick={() => close(true)} autofocus>
          {ask.confirm}
        </button>
      </div>
    </dialog>
  );
}

// ---- data loading and actions -----------------------------------------------------------------

export interface Loaded<T> {
  data: T | undefined;
  error: string | undefined;
  loading: boolean;
  reload: () => void;
  setData: (data: T) => void;
}

/** Loads on mount and when `deps` change; `reload()` loads again (keeping the old data meanwhile). */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[] = []): Loaded<T> {
  const [state, setState] = useState<{ data?: T; error?: string; loading: boolean }>({ loading: true });
  const [tick, setTick] = useState(0);
  useEffect(() => {
    let live = true;
    setState((s) => ({ ...s, loading: true }));
    load().then(
      (data) => live && setState({ data, loading: false }),
      (error) => live && setState((s) => ({ data: s.data, error: messageOf(error), loading: false })),
    );
    return () => {
      live = false;
    };
  }, [...deps, tick]);
  return {
    data: state.data,
    error: state.error,
    loading: state.loading,
    reload: useCallback(() => setTick((t) => t + 1), []),
    setData: useCallback((data: T) => setState({ data, loading: false }), []),
  };
}

export interface ActionOptions {
  /** Shown as a message on success. */
  done?: string;
  /** Asked first (confirmAction's arguments); declining does nothing. */
  confirm?: Parameters<typeof confirmAction>;
}

/**
 * Runs an action: asks first when `confirm` is given, shows the API's error as a message and
 * `done` on success; resolves true when it ran and succeeded. `busy` is true while one runs.
 */
export function useAction(): [boolean, (work: () => Promise<unknown>, options?: ActionOptions) => Promise<boolean>] {
  const [busy, setBusy] = useState(false);
  const run = useCallback(async (work: () => Promise<unknown>, options: ActionOptions = {}) => {
    if (options.confirm && !(await confirmAction(...options.confirm))) return false;
    setBusy(true);
    try {
      await work();
      if (options.done) notify(options.done);
      return true;
    } catch (error) {
      notify(messageOf(error), "error");
      return false;
    } finally {
      setBusy(false);
    }
  }, []);
  return [busy, run];
}

// ---- layout pieces ----------------------------------------------------------------------------

export function PageHeader(props: { title: ComponentChildren; sub?: ComponentChildren; children?: ComponentChildren }) {
  return (
    <header class="page-header">
      <div>
        <h1>{props.title}</h1>
        {props.sub && <p class="muted">{props.sub}</p>}
      </div>
      {props.children && <div class="row">{props.children}</div>}
    </header>
  );
}

export function ErrorBox(props: { error: string; retry?: () => void }) {
  return (
    <div class="error-box" role="alert">
      <strong>Could not load:</strong> {props.error}
      {props.retry && (
        <button type="button" class="small" onClick={props.retry}>
          Try again
        </button>
      )}
    </div>
  );
}

/** What a loaded section shows: the error, a loading line, or `children(data)`. */
export function Show<T>(props: { loaded: Loaded<T>; children: (data: T) => ComponentChildren }) {
  const { data, error, reload } = props.loaded;
  if (error && data === undefined) return <ErrorBox error={error} retry={reload} />;
  if (data === undefined) return <p class="muted loading">Loading…</p>;
  return (
    <>
      {error && <ErrorBox error={error} retry={reload} />}
      {props.children(data)}
    </>
  );
}

export function Card(props: { title?: ComponentChildren; actions?: ComponentChildren; children: ComponentChildren; class?: string }) {
  return (
    <section class={`card ${props.class ?? ""}`}>
      {(props.title || props.actions) && (
        <div class="card-head">
          {props.title && <h2>{props.title}</h2>}
          {props.actions && <div class="row">{props.actions}</div>}
        </div>
      )}
      {props.children}
    </section>
  );
}

export function Badge(props: { tone?: "ok" | "warn" | "bad" | "info" | "muted"; children: ComponentChildren; title?: string }) {
  return (
    <span class={`badge badge-${props.tone ?? "muted"}`} title={props.title}>
      {props.children}
    </span>
  );
}

export function OnlineBadge(props: { online: boolean }) {
  return props.online ? <Badge tone="ok">online</Badge> : <Badge tone="muted">offline</Badge>;
}

export function ProgressBar(props: { value: number; label?: string }) {
  const value = Math.max(0, Math.min(100, Math.round(props.value)));
  return (
    <span class={`progress ${value >= 50 ? "past-half" : ""}`} role="progressbar" aria-valuemin={0} aria-valuemax={100} aria-valuenow={value} aria-label={props.label ?? "progress"}>
      <span class="progress-bar" style={{ width: `${value}%` }} />
      <span class="progress-text">{value}%</span>
    </span>
  );
}

export function Empty(props: { children: ComponentChildren }) {
  return <p class="empty">{props.children}</p>;
}

export function Field(props: { label: string; hint?: ComponentChildren; children: ComponentChildren; wide?: boolean }) {
  return (
    <label class={`field ${props.wide ? "wide" : ""}`}>
      <span class="field-label">{props.label}</span>
      {props.children}
      {props.hint && <span class="hint">{props.hint}</span>}
    </label>
  );
}

export function Pager(props: { offset: number; limit: number; total: number; onChange: (offset: number) => void }) {
  const { offset, limit, total } = props;
  const last = Math.min(total, offset + limit);
  return (
    <nav class="pager" aria-label="Pages">
      <span class="muted">{total === 0 ? "none" : `${offset + 1}–${last} of ${total.toLocaleString()}`}</span>
      <button type="button" class="small" disabled={offset === 0} onClick={() => props.onChange(Math.max(0, offset - limit))}>
        ‹ Previous
      </button>
      <button type="button" class="small" disabled={last >= total} onClick={() => props.onChange(offset + limit)}>
        Next ›
      </button>
    </nav>
  );
}

/** Copies `text`; falls back to a selection copy where the clipboard API is missing (plain http) or refuses. */
export async function copyText(text: string): Promise<void> {
  if (navigator.clipboard && window.isSecureContext) {
    try {
      return await navigator.clipboard.writeText(text);
    } catch {
      // Refused (no permission, page not focused): the selection copy below.
    }
  }
  const area = document.createElement("textarea");
  area.value = text;
  area.setAttribute("readonly", "");
  area.style.position = "fixed";
  area.style.opacity = "0";
  document.body.appendChild(area);
  area.select();
  const ok = document.execCommand("copy");
  area.remove();
  if (!ok) throw new Error("copying is not possible here: select the text and copy it");
}

// ---- formatting -------------------------------------------------------------------------------

export function formatBytes(n: number | undefined | null): string {
  if (n === undefined || n === null || !Number.isFinite(n)) return "–";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${unit === 0 ? value : value.toFixed(value < 10 ? 1 : 0)} ${units[unit]}`;
}

/** "3 min ago" with the exact time as a tooltip; "never" for null. */
export function Time(props: { value: string | number | null | undefined }) {
  if (props.value === null || props.value === undefined || props.value === "") return <span class="muted">never</span>;
  const date = typeof props.value === "number" ? new Date(props.value * 1000) : new Date(props.value);
  if (Number.isNaN(date.getTime())) return <span>{String(props.value)}</span>;
  const seconds = Math.round((Date.now() - date.getTime()) / 1000);
  const abs = Math.abs(seconds);
  const text =
    abs < 45 ? "just now" : abs < 3600 ? `${Math.round(abs / 60)} min` : abs < 86400 ? `${Math.round(abs / 3600)} h` : abs < 86400 * 60 ? `${Math.round(abs / 86400)} d` : date.toLocaleDateString();
  const label = abs < 45 || abs >= 86400 * 60 ? text : seconds >= 0 ? `${text} ago` : `in ${text}`;
  return <time dateTime={date.toISOString()} title={date.toLocaleString()}>{label}</time>;
}

/** Debounces a value (the filter box): the last value after `ms` of quiet. */
export function useDebounced<T>(value: T, ms = 250): T {
  const [current, setCurrent] = useState(value);
  useEffect(() => {
    const timer = setTimeout(() => setCurrent(value), ms);
    return () => clearTimeout(timer);
  }, [value, ms]);
  return current;
}
