import { useEffect, useMemo, useState } from "preact/hooks";
import { api, call, seg } from "../api.ts";
import { href, navigate, type Page, type PageProps } from "../router.ts";
import {
  canReadTests,
  canRunTests,
  countRows,
  Counts,
  duration,
  failuresFirst,
  isFinal,
  RepeatDialog,
  artifactsOf,
  runBase,
  runOf,
  RUN_STREAM,
  StatusBadge,
  whereOf,
  type RunEvents,
} from "../testruns.tsx";
import type { Artifact, DeviceProgress, ReportRow, TestRun } from "../../../testrun/schema.ts";
import { Card, Empty, ErrorBox, PageHeader, Show, Table, Time, useAction, useDebounced, useEventSource, useEvery, useLoad } from "../ui.tsx";

/** A run: here (`/runs/<id>`), or on a lab node read through this gateway (`/runs/<id>?node=<name>`). */
function RunPage({ params, query, me }: PageProps) {
  const id = params.id!;
  const node = query.get("node") ?? undefined;
  const base = runBase(id, node);
  const run = useLoad(() => runOf(id, node), [base]);
  const [repeat, setRepeat] = useState(false);
  const [busy, act] = useAction();
  const write = canRunTests(me) && !node;

  // Live: the run stream for runs here; a lab node's run has no stream at this gateway, so it is
  // asked again every 2 s until it ends.
  useEventSource<RunEvents>(
    node ? undefined : RUN_STREAM,
    {
      run: (changed) => changed.id === id && run.setData(changed),
      "run-deleted": (deleted) => deleted.id === id && navigate("/runs"),
    },
    run.reload,
  );
  useEvery(2000, run.reload, Boolean(node && run.data && !isFinal(run.data)));

  const abort = () =>
    act(() => api.delete("/api/v1/test-runs/:id", { id }), {
      confirm: ["Abort this run?", { body: "A running case is stopped (SIGTERM, then SIGKILL after 5 s) and reported as skipped.", confirm: "Abort run" }],
      done: "Abort requested",
    });
  const remove = async () => {
    if (await act(() => api.delete("/api/v1/test-runs/:id/record", { id }), { confirm: ["Delete this run?", { body: "Its report and artifacts are deleted too.", confirm: "Delete run" }], done: "Run deleted" }))
      navigate("/runs");
  };

  return (
    <Show loaded={run}>
      {(r) => (
        <>
          <PageHeader
            title={
              <>
                <span class="mono">{r.config_name}</span> <StatusBadge status={r.status} aborting={r.abort_requested} />
              </>
            }
            sub={
              <>
                <a href={href("/runs")}>‹ All runs</a>
                {node ? ` · on node ${node}` : ""} · <span class="mono small">{r.id}</span>
              </>
            }
          >
            {write && !isFinal(r) && (
              <button type="button" class="danger" disabled={busy || r.abort_requested} onClick={abort}>
                Abort
              </button>
            )}
            {write && isFinal(r) && (
              <>
                <button type="button" onClick={() => setRepeat(true)}>
                  Repeat…
                </button>
                <button type="button" class="danger" disabled={busy} onClick={remove}>
                  Delete
                </button>
              </>
            )}
          </PageHeader>
          <RunHeader run={r} node={node} />
          {r.error && <ErrorBox error={r.error} />}
          {r.warnings.length > 0 && (
            <div class="warn-box">
              <strong>Warnings:</strong>
              <ul>
                {r.warnings.map((w, i) => (
                  <li key={i}>{w}</li>
                ))}
              </ul>
            </div>
          )}
          {r.devices && <Devices devices={r.devices} />}
          {isFinal(r) ? (
            <>
              <Report base={base} runId={r.id} devices={r.devices?.map((d) => d.name)} />
              <Artifacts base={base} run={id} node={node} />
            </>
          ) : (
            <Card title="Report">
              <p class="muted">
                {r.status === "pending" ? "Waiting in the queue (one run at a time)…" : r.devices ? "Running on the devices above… the report and artifacts appear when every device is done." : "Running… the report and artifacts appear when it ends."}
              </p>
            </Card>
          )}
          {repeat && <RepeatDialog run={r} onClose={() => setRepeat(false)} />}
        </>
      )}
    </Show>
  );
}

function RunHeader(props: { run: TestRun; node: string | undefined }) {
  const r = props.run;
  const overrides = Array.isArray(r.overrides) ? r.overrides : Object.keys(r.overrides ?? {}).length > 0 ? [JSON.stringify(r.overrides)] : [];
  const where = props.node ?? whereOf(r);
  return (
    <Card>
      <dl class="props run-props">
        <dt>Config</dt>
        <dd>
          {props.node ? <span class="mono">{r.config_name}</span> : <a class="mono" href={href(`/configs/${seg(r.config_name)}`)}>{r.config_name}</a>}
        </dd>
        <dt>Suite</dt>
        <dd>{r.test_suite_name || <span class="muted">all groups</span>}</dd>
        <dt>{r.devices ? "Devices" : "Node"}</dt>
        <dd>{where}</dd>
        <dt>Created</dt>
        <dd>
          <Time value={r.created_at} /> <span class="muted small">{r.created_at}</span>
        </dd>
        <dt>Started</dt>
        <dd>{r.started_at ? <Time value={r.started_at} /> : <span class="muted">not yet</span>}</dd>
        <dt>Finished</dt>
        <dd>
          {r.finished_at ? <Time value={r.finished_at} /> : <span class="muted">not yet</span>}
          {r.started_at && r.finished_at && <span class="muted small"> ({duration(r.started_at, r.finished_at)})</span>}
        </dd>
        <dt>Trigger</dt>
        <dd>
          {r.machine_target === "localhost" && !props.node ? <a href={href(`/triggers/${seg(r.trigger_id)}`)}>{r.trigger_id}</a> : <span class="mono small">{r.trigger_id}</span>}
          {r.repeat_of && (
            <>
              {" "}
              · repeats <a href={href(`/runs/${seg(r.repeat_of)}`)}>{r.repeat_of.slice(0, 8)}</a>
            </>
          )}
        </dd>
        {r.pattern && (
          <>
            <dt>Pattern</dt>
            <dd class="mono">-k {r.pattern}</dd>
          </>
        )}
        {overrides.length > 0 && (
          <>
            <dt>Overrides</dt>
            <dd>
              {overrides.map((o, i) => (
                <div key={i} class="mono small">
                  {o}
                </div>
              ))}
            </dd>
          </>
        )}
        {Object.keys(r.metadata).length > 0 && (
          <>
            <dt>Metadata</dt>
            <dd>
              {Object.entries(r.metadata).map(([k, v]) => (
                <div key={k} class="small">
                  <span class="mono">{k}</span>: {v ?? <span class="muted">missing</span>}
                </div>
              ))}
            </dd>
          </>
        )}
      </dl>
    </Card>
  );
}

const DEVICE_STATES: Record<string, string> = { waiting: "waiting to connect", pending: "pending" };

/** A run on managed devices: each device's share, live (counts as its rows come), failures first. */
function Devices(props: { devices: DeviceProgress[] }) {
  const running = props.devices.filter((d) => d.status === "waiting" || d.status === "running").length;
  return (
    <Card title={`Devices (${props.devices.length})`} actions={running > 0 ? <span class="muted small">{running} still running</span> : undefined}>
      <Table
        rows={props.devices}
        class="devices"
        label="Devices"
        rowKey={(d) => d.mac}
        rowAttrs={(d) => ({ "data-device": d.name, class: d.status === "failed" || d.failed > 0 ? "row-failed" : undefined })}
        columns={[
          { head: "Device", cell: (d) => <span title={d.mac}>{d.name}</span> },
          { head: "State", cell: (d) => (DEVICE_STATES[d.status] ? <span class="muted">{DEVICE_STATES[d.status]}</span> : <StatusBadge status={d.status} />) },
          { head: "Passed", class: "num", headClass: "num", cell: (d) => d.passed.toLocaleString() },
          { head: "Failed", class: "num", headClass: "num", cell: (d) => (d.failed > 0 ? <span class="fail-count">{d.failed.toLocaleString()}</span> : "0") },
          { head: "Skipped", class: "num hide-narrow", headClass: "num hide-narrow", cell: (d) => d.skipped.toLocaleString() },
          { head: "Why", cell: (d) => (d.error ? <span class={d.status === "aborted" ? "muted small" : "form-error small"}>{d.error}</span> : "") },
        ]}
      />
    </Card>
  );
}

const PAGE = 100;

/** A case's duration: "<1 ms", "12 ms", "3.42 s"; the cell as it is when it is not a number. */
const seconds = (cell: string | undefined): string => {
  const s = Number(cell);
  if (cell === undefined || cell === "" || !Number.isFinite(s)) return cell ?? "";
  return s < 0.001 ? "<1 ms" : s < 1 ? `${Math.round(s * 1000)} ms` : `${s.toFixed(2)} s`;
};

/** Columns dropped on narrow screens. */
const narrow = (column: string) => column === "start time" || column === "artifacts" || column === "duration";
/** Keys of a JSON row shown in columns of their own (the check, the result, the message), not as they are. */
const OWN_COLUMNS = new Set(["test name", "module", "message", "status", "name", "board", "output"]);

/** A case's check: the entry's name where it has one, over its report name (the module column as its tooltip). */
function Check(props: { row: ReportRow }) {
  const { row } = props;
  const test = (
    <span class={`mono ${row.name ? "small muted" : ""}`} title={row.module}>
      {row["test name"]}
    </span>
  );
  if (!row.name) return test;
  return (
    <span class="check">
      <strong class="check-name">{row.name}</strong>
      {test}
    </span>
  );
}

/** A case's message: short ones as they are, long ones behind a toggle; a failure's output tail beneath, unfolded on demand. */
function Message(props: { text: string; output?: string | undefined; open: boolean; onToggle: () => void }) {
  const { text, output, open } = props;
  const short = text.length <= 90 && !text.includes("\n");
  if (short && !output) return <>{text}</>;
  return (
    <>
      {short && <div>{text}</div>}
      <button type="button" class="link message-toggle" aria-expanded={open} onClick={props.onToggle}>
        {open ? "▾ " : "▸ "}
        {short ? "output" : open ? "" : `${text.split("\n")[0]!.slice(0, 90)}…`}
      </button>
      {open && !short && <pre class="output message-full">{text}</pre>}
      {open && output && (
        <pre class="output message-full" aria-label="Output">
          {output}
        </pre>
      )}
    </>
  );
}

/** The report as a table: counts, failures first, a filter box, messages expandable; paged (10,000 cases stay quick). */
function Report(props: { base: string; runId: string; devices?: string[] | undefined }) {
  const report = useLoad(async () => {
    const res = await call("GET", `${props.base}/report?format=json`);
    // A protoplaster node answers CSV whatever the format: offer the download only.
    if (!(res.headers.get("content-type") ?? "").includes("json")) return undefined;
    return (await res.json()) as ReportRow[];
  }, [props.base]);
  const [text, setText] = useState("");
  const [status, setStatus] = useState("");
  const [device, setDevice] = useState("");
  const [open, setOpen] = useState<Set<number>>(new Set());
  const filter = useDebounced(text.trim().toLowerCase(), 200);
  const ordered = useMemo(() => (report.data ? failuresFirst(report.data) : []), [report.data]);
  const counts = useMemo(() => countRows(report.data ?? []), [report.data]);
  const shown = useMemo(
    () =>
      ordered.filter(
        (row) => (!status || row.status === status) && (!device || row["device name"] === device) && (!filter || Object.values(row).some((v) => v.toLowerCase().includes(filter))),
      ),
    [ordered, filter, status, device],
  );
  useEffect(() => setOpen(new Set()), [filter, status, device]);
  const toggle = (n: number) => {
    const next = new Set(open);
    if (next.has(n)) next.delete(n);
    else next.add(n);
    setOpen(next);
  };
  const columns = report.data?.[0] ? Object.keys(report.data[0]).filter((c) => !OWN_COLUMNS.has(c)) : [];
  // On a run on devices the report's device name is the board's.
  const onBoards = report.data?.some((row) => row.board) ?? false;

  const downloads = (
    <>
      <a class="button small" href={`${props.base}/report`} download={`${props.runId}.csv`}>
        CSV
      </a>
      <a class="button small" href={`${props.base}/report?format=json`} download={`${props.runId}.json`}>
        JSON
      </a>
    </>
  );
  if (report.error && /Report file not found/.test(report.error)) {
    return (
      <Card title="Report">
        <p class="muted">No report: the run ended before its first case (aborted while waiting, or a metadata command failed).</p>
      </Card>
    );
  }
  return (
    <Card title="Report" actions={downloads}>
      <Show loaded={report}>
        {(rows) =>
          rows === undefined ? (
            <p class="muted">This node serves its report as CSV only: download it above.</p>
          ) : rows.length === 0 ? (
            <Empty>No case ran (a pattern that matches nothing, or no entry for this node).</Empty>
          ) : (
            <>
              <Counts counts={counts} />
              <div class="row filters">
                <input class="filter" type="search" aria-label="Filter cases" placeholder="Filter by name, module or message" value={text} onInput={(e) => setText((e.target as HTMLInputElement).value)} />
                <select aria-label="Filter by result" value={status} onChange={(e) => setStatus((e.target as HTMLSelectElement).value)}>
                  <option value="">all results</option>
                  <option value="failed">failed</option>
                  <option value="skipped">skipped</option>
                  <option value="passed">passed</option>
                </select>
                {props.devices && (
                  <select aria-label="Filter by device" value={device} onChange={(e) => setDevice((e.target as HTMLSelectElement).value)}>
                    <option value="">all devices</option>
                    {props.devices.map((d) => (
                      <option key={d} value={d}>
                        {d}
                      </option>
                    ))}
                  </select>
                )}
                <span class="muted small">{shown.length === rows.length ? "failures first" : `${shown.length.toLocaleString()} of ${rows.length.toLocaleString()} cases`}</span>
              </div>
              <Table
                key={`${filter}\n${status}\n${device}`}
                rows={shown}
                class="report"
                label="Report"
                pageSize={PAGE}
                rowKey={(_, n) => n}
                rowAttrs={(row) => ({ "data-case": row["test name"], class: row.status === "failed" ? "row-failed" : undefined })}
                columns={[
                  { head: "Result", cell: (row) => <StatusBadge status={row.status ?? "?"} /> },
                  { head: "Check", cell: (row) => <Check row={row} /> },
                  ...columns.map((c) => ({
                    head: c === "device name" && onBoards ? "board" : c,
                    headClass: narrow(c) ? "hide-narrow" : undefined,
                    class: narrow(c) ? "hide-narrow mono small" : undefined,
                    cell: (row: ReportRow) => (c === "duration" ? seconds(row[c]) : row[c]),
                  })),
                  { head: "Message", class: "message", cell: (row, n) => <Message text={row.message ?? ""} output={row.output} open={open.has(n)} onToggle={() => toggle(n)} /> },
                ]}
              />
            </>
          )
        }
      </Show>
    </Card>
  );
}

interface TreeDir {
  dirs: Map<string, TreeDir>;
  files: Artifact[];
}

function buildTree(list: Artifact[]): TreeDir {
  const root: TreeDir = { dirs: new Map(), files: [] };
  for (const a of list) {
    const parts = a.name.split("/");
    let dir = root;
    for (const part of parts.slice(0, -1)) {
      if (!dir.dirs.has(part)) dir.dirs.set(part, { dirs: new Map(), files: [] });
      dir = dir.dirs.get(part)!;
    }
    dir.files.push(a);
  }
  return root;
}

// What the server previews (src/storage/send.ts, untrustedFileHeaders): raster images as
// themselves, anything else as text/plain. An SVG or HTML file is shown as its text, never rendered.
const IMAGE = /\.(png|jpe?g|gif|webp)$/i;
const TEXT = /\.(txt|log|csv|json|ya?ml|xml|svg|out|err|md|ini|conf|cfg|sh|py|html?)$/i;
/** Largest text preview read (the rest is offered as a download). */
const PREVIEW_BYTES = 256 * 1024;

/** The run's artifacts as a tree; text and images preview in place (?preview=true), everything downloads. */
function Artifacts(props: { base: string; run: string; node: string | undefined }) {
  const list = useLoad(() => artifactsOf(props.run, props.node), [props.base]);
  const [preview, setPreview] = useState<string>();
  const url = (name: string, inline = false) => `${props.base}/artifacts/${name.split("/").map(seg).join("/")}${inline ? "?preview=true" : ""}`;
  const renderDir = (dir: TreeDir, path: string) => (
    <ul class="tree">
      {[...dir.dirs.entries()].map(([name, sub]) => (
        <li key={`d:${name}`}>
          <details open>
            <summary>
              <span class="tree-dir">{name}/</span>
            </summary>
            {renderDir(sub, `${path}${name}/`)}
          </details>
        </li>
      ))}
      {dir.files.map((a) => {
        const base = a.name.split("/").pop()!;
        return (
          <li key={a.name} data-artifact={a.name} class={preview === a.name ? "selected" : undefined}>
            <span class="mono">{base}</span>{" "}
            {(IMAGE.test(base) || TEXT.test(base) || !base.includes(".")) && (
              <button type="button" class="link small" onClick={() => setPreview(preview === a.name ? undefined : a.name)} aria-expanded={preview === a.name}>
                {preview === a.name ? "Hide" : "Preview"}
              </button>
            )}
            <a class="small" href={url(a.name)} download={base}>
              Download
            </a>
          </li>
        );
      })}
    </ul>
  );
  return (
    <Card title="Artifacts">
      <Show loaded={list}>
        {(items) =>
          items.length === 0 ? (
            <p class="muted">No files.</p>
          ) : (
            <div class="artifacts">
              <div class="artifact-tree">{renderDir(buildTree(items), "")}</div>
              {preview && <Preview name={preview} url={url(preview, true)} download={url(preview)} />}
            </div>
          )
        }
      </Show>
    </Card>
  );
}

function Preview(props: { name: string; url: string; download: string }) {
  const image = IMAGE.test(props.name);
  const text = useLoad(async () => {
    if (image) return "";
    const res = await call("GET", props.url);
    const reader = res.body!.getReader();
    const chunks: Uint8Array[] = [];
    let size = 0;
    while (size < PREVIEW_BYTES) {
      const { done, value } = await reader.read();
      if (done) break;
      chunks.push(value);
      size += value.byteLength;
    }
    await reader.cancel().catch(() => {});
    const all = new Uint8Array(size);
    let at = 0;
    for (const c of chunks) (all.set(c, at), (at += c.byteLength));
    const decoded = new TextDecoder("utf-8", { fatal: false }).decode(all.subarray(0, PREVIEW_BYTES));
    return size >= PREVIEW_BYTES ? `${decoded}\n… (cut at ${PREVIEW_BYTES / 1024} KB: download the whole file)` : decoded;
  }, [props.url]);
  return (
    <div class="artifact-preview" aria-label={`Preview of ${props.name}`}>
      <div class="row">
        <strong class="mono">{props.name}</strong>
        <a class="small" href={props.download} download={props.name.split("/").pop()}>
          Download
        </a>
      </div>
      {image ? (
        <img src={props.url} alt={props.name} class="preview-image" />
      ) : (
        <Show loaded={text}>{(t) => (t === "" ? <p class="muted">(empty file)</p> : <pre class="output preview-text">{t}</pre>)}</Show>
      )}
    </div>
  );
}

export const runPage: Page = { path: "/runs/:id", title: "Test run", component: RunPage, visible: canReadTests };
