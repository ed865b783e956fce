/**
 * The console's building blocks, shared by every page: messages, dialogs (`Modal`, confirmation),
 * loading (`useLoad`, `Show`), actions, event streams (`useEventSource`), tables (`Table`), badges
 * and formatting. A page imports from here (and from the shared modules beside it), never from
 * another page.
 */
import type { ComponentChildren } from "preact";
import { useCallback, useEffect, useId, useMemo, useRef, useState } from "preact/hooks";
import { fieldErrorOf, messageOf, type FieldError } from "./api.ts";

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
  useEffect(() => {
    showAsk = setAsk;
  }, []);
  if (!ask) return null;
  // Closing the dialog (Escape) after an answer resolves nothing more: a promise settles once.
  const close = (yes: boolean) => {
    ask.resolve(yes);
    setAsk(undefined);
  };
  return (
    <Modal title={ask.title} onClose={() => close(false)} narrow>
      {ask.body && <div class="confirm-body">{ask.body}</div>}
      <div class="row end">
        <button type="button" onClick={() => close(false)}>
          Cancel
        </button>
        <button type="button" class={ask.danger ? "danger" : "primary"} onClick={() => close(true)} autofocus>
          {ask.confirm}
        </button>
      </div>
    </Modal>
  );
}

/** A modal `<dialog>` (forms, confirmation): Escape or the caller's Cancel closes it through `onClose`. */
export function Modal(props: { title: string; onClose: () => void; children: ComponentChildren; wide?: boolean; narrow?: boolean }) {
  const ref = useRef<HTMLDialogElement>(null);
  const id = useId();
  useEffect(() => {
    if (ref.current && !ref.current.open) ref.current.showModal();
  }, []);
  const size = props.narrow ? "" : props.wide ? "form-dialog wide" : "form-dialog";
  return (
    <dialog ref={ref} class={`confirm ${size}`} onCancel={props.onClose} onClose={props.onClose} aria-labelledby={`${id}-title`}>
      <h2 id={`${id}-title`}>{props.title}</h2>
      {props.children}
    </dialog>
  );
}

/** The end of a form in a Modal: the server's refusal in place, Cancel and the submit button. */
export function ModalButtons(props: { error: string | undefined; onCancel: () => void; submit: ComponentChildren; disabled?: boolean }) {
  return (
    <>
      {props.error && (
        <p class="form-error" role="alert">
          {props.error}
        </p>
      )}
      <div class="row end">
        <button type="button" onClick={props.onCancel}>
          Cancel
        </button>
        <button type="submit" class="primary" disabled={props.disabled}>
          {props.submit}
        </button>
      </div>
    </>
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

/**
 * Loads on mount and when `deps` change; `reload()` loads again (keeping the old data meanwhile).
 * `setData` (an event's newer state) wins over a load that was already under way: that load's
 * answer may predate the event, and anything after the event comes as another event.
 */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[] = []): Loaded<T> {
  const [state, setState] = useState<{ data?: T; error?: string; loading: boolean }>({ loading: true });
  const [tick, setTick] = useState(0);
  const pushed = useRef(0);
  useEffect(() => {
    let live = true;
    const since = pushed.current;
    setState((s) => ({ ...s, loading: true }));
    load().then(
      (data) => live && setState((s) => (pushed.current === since ? { data, loading: false } : { ...s, loading: false })),
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
    setData: useCallback((data: T) => {
      pushed.current++;
      setState({ data, loading: false });
    }, []),
  };
}

/** Calls `fn` every `ms` while `active` (state no event announces: a lab node's run, registrations). */
export function useEvery(ms: number, fn: () => void, active = true): void {
  const latest = useRef(fn);
  latest.current = fn;
  useEffect(() => {
    if (!active) return;
    const timer = setInterval(() => latest.current(), ms);
    return () => clearInterval(timer);
  }, [ms, active]);
}

/**
 * Listens to a server-sent event stream while the component is shown: `handlers[name](data)` for
 * each event, its JSON data parsed (a malformed event changes nothing); `onOpen` after every
 * (re)connect. The session cookie authenticates it and EventSource reconnects by itself. No
 * `url` (undefined): no stream. Returns whether the stream is open. The one way pages follow
 * live changes: device state (live.ts) and test runs (testruns.tsx) both use it.
 *
 * `onOpen` is required because what changed before the stream opened (after the page loaded, or
 * while it was reconnecting) comes as no event: it loads again what the events keep up to date.
 */
export function useEventSource<Events extends object>(
  url: string | undefined,
  handlers: { [Name in keyof Events]?: (data: Events[Name]) => void },
  onOpen: () => void,
): boolean {
  const [open, setOpen] = useState(false);
  // The handlers of the last render: listeners stay registered while the callbacks change.
  const latest = useRef({ handlers, onOpen });
  latest.current = { handlers, onOpen };
  const names = Object.keys(handlers).sort().join(" ");
  useEffect(() => {
    if (!url) return;
    const source = new EventSource(url);
    source.onopen = () => {
      setOpen(true);
      latest.current.onOpen();
    };
    source.onerror = () => setOpen(false);
    for (const name of names.split(" ").filter(Boolean)) {
      source.addEventListener(name, (e) => {
        let data: unknown;
        try {
          data = JSON.parse((e as MessageEvent<string>).data);
        } catch {
          return;
        }
        (latest.current.handlers as Record<string, ((data: unknown) => void) | undefined>)[name]?.(data);
      });
    }
    return () => {
      source.close();
      setOpen(false);
    };
  }, [url, names]);
  return open;
}

/**
 * A count that moves on whatever ticks (one timer for the page however many subscribe): what
 * shows the passing of time (`Time`) or the effect of actions (`useChanges`) renders again.
 */
function ticker(start?: (bump: () => void) => () => void) {
  let count = 0;
  let stop: (() => void) | undefined;
  const listeners = new Set<(n: number) => void>();
  const bump = () => {
    count++;
    for (const l of listeners) l(count);
  };
  const use = (): number => {
    const [n, setN] = useState(count);
    useEffect(() => {
      listeners.add(setN);
      if (listeners.size === 1 && start) stop = start(bump);
      return () => {
        listeners.delete(setN);
        if (listeners.size === 0) stop?.();
      };
    }, []);
    return n;
  };
  return { use, bump };
}

/** Relative times ("3 min ago") move on with this tick. */
const clock = ticker((bump) => {
  const timer = setInterval(bump, 15_000);
  return () => clearInterval(timer);
});
/** Moves each time an action (useAction) succeeds on the page. */
const actions = ticker();
/** Changes after every successful action: a view of what actions record (the audit log) loads again on it. */
export const useChanges = (): number => actions.use();

export interface ActionOptions {
  /** Shown as a message on success. */
  done?: string;
  /** Asked first (confirmAction's arguments); declining does nothing. */
  confirm?: Parameters<typeof confirmAction>;
  /** The caller shows the error itself (a form, beside its field): no message. */
  quiet?: boolean;
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
      actions.bump();
      return true;
    } catch (error) {
      if (!options.quiet) notify(messageOf(error), "error");
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

/** A labelled input; `error` (the server's refusal of this field, from `useFormErrors`) shows beneath it. */
export function Field(props: { label: string; hint?: ComponentChildren; children: ComponentChildren; wide?: boolean; error?: string }) {
  return (
    <label class={`field ${props.wide ? "wide" : ""} ${props.error ? "has-error" : ""}`}>
      <span class="field-label">{props.label}</span>
      {props.children}
      {props.error ? (
        <span class="field-error" role="alert">
          {props.error}
        </span>
      ) : (
        props.hint && <span class="hint">{props.hint}</span>
      )}
    </label>
  );
}

export interface FormErrors {
  /** The error of the field at this path (`Field`'s `error`). */
  at: (field: string) => string | undefined;
  /** An error of no field the form shows: at its foot (`ModalButtons`' `error`, or a `form-error`). */
  foot: string | undefined;
  /** Keeps the error of a submit (undefined: none). */
  set: (error: unknown) => void;
}

/**
 * A form's errors from the server: each beside the field it names (`fields`: the API paths of the
 * form's fields, "metadata.name"), the others at the form's foot, without the validation prefix.
 */
export function useFormErrors(fields: readonly string[]): FormErrors {
  const [error, setError] = useState<FieldError | undefined>();
  const shown = error?.field !== undefined && fields.includes(error.field);
  return {
    at: (field) => (shown && error?.field === field ? error.text : undefined),
    foot: error && !shown ? error.message : undefined,
    set: useCallback((e: unknown) => setError(e === undefined ? undefined : fieldErrorOf(e)), []),
  };
}

// ---- tables -----------------------------------------------------------------------------------

export interface Column<T> {
  /** The header ("" for a column of buttons). */
  head: ComponentChildren;
  cell: (row: T, index: number) => ComponentChildren;
  /** Classes of the column's cells: "hide-narrow" (dropped below 800 px), "actions", "mono", ... */
  class?: string;
  /** The header's class where it differs from the cells' (`class` otherwise). */
  headClass?: string;
  /** Makes the column sortable (click the header): the value rows are ordered by. */
  sort?: (row: T) => string | number | null | undefined;
  /** Makes the column sortable on the server (with the table's `serverSort`): the order's name. */
  sortKey?: string;
}

export interface TableProps<T> {
  /** The rows in their own order; undefined while loading. */
  rows: readonly T[] | undefined;
  /** The columns; `false` leaves one out (`writable && {...}`). */
  columns: ReadonlyArray<Column<T> | false | undefined>;
  /** A row's key; `index` is its place in the table (all pages, after sorting). */
  rowKey: (row: T, index: number) => string | number;
  /** A row's attributes: `data-*` that tests and links find it by, a class. */
  rowAttrs?: (row: T) => Record<string, string | number | undefined>;
  /** Shown instead of the table when there are no rows (without it, an empty table). */
  empty?: ComponentChildren;
  /** Shown while `rows` is undefined. */
  loading?: ComponentChildren;
  /** Pages in the browser: this many rows at a time (the list is all loaded). */
  pageSize?: number;
  /** Pages on the server: the list is one page of `total`; `onChange` asks for another. */
  pager?: { offset: number; limit: number; total: number; onChange: (offset: number) => void };
  /** More classes of the `<table>` ("report"). */
  class?: string;
  label?: string;
  /** Without a header row (a list of actions). */
  headless?: boolean;
  /**
   * Rows can be selected: a checkbox per row (and one in the header for the rows shown), and
   * while some are selected a bar with `actions(selected, clear)`. A row is selected by its
   * `key`, so a reload keeps the selection of the rows still there.
   */
  select?: { key: (row: T) => string; label: (row: T) => string; actions: (selected: T[], clear: () => void) => ComponentChildren };
  /** Sorted on the server: which column (its `sortKey`) and the way; `onChange` asks for another order. */
  serverSort?: { key: string | undefined; descending: boolean; onChange: (key: string | undefined, descending: boolean) => void };
}

type Sorted = { column: number; descending: boolean } | undefined;

const missing = (v: string | number | null | undefined) => v === null || v === undefined || v === "" || Number.isNaN(v);
const compareValues = (a: string | number | null | undefined, b: string | number | null | undefined): number => {
  if (a === b) return 0;
  // Missing values last whichever the direction.
  if (missing(a)) return 1;
  if (missing(b)) return -1;
  return typeof a === "number" && typeof b === "number" ? a - b : String(a).localeCompare(String(b), undefined, { numeric: true });
};

/**
 * The console's table: header, rows, optional sorting by column, paging in the browser
 * (`pageSize`) or on the server (`pager`), an empty text and a loading line. Give it a `key` that
 * changes with a filter to start again at the first page.
 */
export function Table<T>(props: TableProps<T>) {
  const columns = props.columns.filter((c): c is Column<T> => Boolean(c));
  const [sorted, setSorted] = useState<Sorted>(undefined);
  const [offset, setOffset] = useState(0);
  const [chosen, setChosen] = useState<ReadonlySet<string>>(new Set());
  const wrap = useRef<HTMLDivElement>(null);
  const rows = props.rows;
  const select = props.select;
  // Only rows still listed stay selected (a reload may have dropped some).
  const selected = useMemo(() => (select && rows ? rows.filter((row) => chosen.has(select.key(row))) : []), [rows, chosen]);
  const ordered = useMemo(() => {
    const by = sorted && columns[sorted.column]?.sort;
    if (!rows || !by || !sorted) return rows;
    const sign = sorted.descending ? -1 : 1;
    return rows
      .map((row, i) => ({ row, i, value: by(row) }))
      .sort((a, b) => compareValues(a.value, b.value) * sign || a.i - b.i)
      .map((x) => x.row);
  }, [rows, sorted]);
  if (!ordered) return <p class="muted loading">{props.loading ?? "Loading…"}</p>;
  if (ordered.length === 0 && props.empty !== undefined) return <Empty>{props.empty}</Empty>;

  const size = props.pageSize;
  const first = size ? Math.min(offset, Math.max(0, Math.floor((ordered.length - 1) / size) * size)) : 0;
  const shown = size ? ordered.slice(first, first + size) : ordered;
  const server = props.serverSort;
  const toggle = (column: number) => {
    const key = columns[column]?.sortKey;
    if (server && key) return server.onChange(server.key !== key ? key : server.descending ? undefined : key, server.key === key && !server.descending);
    setSorted((s) => (s?.column !== column ? { column, descending: false } : s.descending ? undefined : { column, descending: true }));
  };
  const sortState = (column: number): "ascending" | "descending" | undefined => {
    const key = columns[column]?.sortKey;
    if (server && key) return server.key === key ? (server.descending ? "descending" : "ascending") : undefined;
    return sorted?.column === column ? (sorted.descending ? "descending" : "ascending") : undefined;
  };
  const sortable = (c: Column<T>) => Boolean(c.sort || (server && c.sortKey));
  const keys = select ? shown.map((row) => select.key(row)) : [];
  const allShown = keys.length > 0 && keys.every((k) => chosen.has(k));
  const choose = (list: string[], on: boolean) =>
    setChosen((now) => {
      const next = new Set(now);
      for (const k of list) on ? next.add(k) : next.delete(k);
      return next;
    });
  const clear = () => setChosen(new Set());
  return (
    <>
      {select && selected.length > 0 && (
        <div class="bulk-bar" role="region" aria-label="Selected rows">
          <strong>{selected.length.toLocaleString()} selected</strong>
          {select.actions(selected, clear)}
          <button type="button" class="link" onClick={clear}>
            Clear selection
          </button>
        </div>
      )}
      <div class="table-wrap" ref={wrap}>
        <table class={`table ${props.class ?? ""}`} aria-label={props.label}>
          {!props.headless && (
            <thead>
              <tr>
                {select && (
                  <th class="select">
                    <input type="checkbox" aria-label="Select all shown" checked={allShown} onChange={() => choose(keys, !allShown)} />
                  </th>
                )}
                {columns.map((c, i) => {
                  const state = sortState(i);
                  return (
                    <th key={i} class={c.headClass ?? c.class} aria-sort={sortable(c) ? (state ?? "none") : undefined}>
                      {sortable(c) ? (
                        <button type="button" class="sort" onClick={() => toggle(i)}>
                          {c.head}
                          <span class="sort-mark" aria-hidden="true">
                            {state === "ascending" ? "▴" : state === "descending" ? "▾" : "↕"}
                          </span>
                        </button>
                      ) : (
                        c.head
                      )}
                    </th>
                  );
                })}
              </tr>
            </thead>
          )}
          <tbody>
            {shown.map((row, i) => (
              <tr key={props.rowKey(row, first + i)} {...props.rowAttrs?.(row)}>
                {select && (
                  <td class="select">
                    <input type="checkbox" aria-label={`Select ${select.label(row)}`} checked={chosen.has(select.key(row))} onChange={(e) => choose([select.key(row)], e.currentTarget.checked)} />
                  </td>
                )}
                {columns.map((c, j) => (
                  <td key={j} class={c.class}>
                    {c.cell(row, first + i)}
                  </td>
                ))}
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {size !== undefined && ordered.length > size && (
        <Pager
          offset={first}
          limit={size}
          total={ordered.length}
          onChange={(o) => {
            setOffset(o);
            wrap.current?.scrollIntoView({ block: "start" });
          }}
        />
      )}
      {props.pager && <Pager {...props.pager} />}
    </>
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

/** A time the API sent (RFC 822, ISO 8601 or UNIX seconds) as milliseconds, for sorting; undefined when there is none. */
export function timeOf(value: string | number | null | undefined): number | undefined {
  if (value === null || value === undefined || value === "") return undefined;
  const ms = typeof value === "number" ? value * 1000 : Date.parse(value);
  return Number.isNaN(ms) ? undefined : ms;
}

/** "3 min ago" with the exact time as a tooltip; "never" for null. Moves on with the page's clock tick. */
export function Time(props: { value: string | number | null | undefined }) {
  clock.use();
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
