import { useEffect, useRef, useState } from "preact/hooks";
import { api, call, messageOf, seg } from "../api.ts";
import { href, navigate, replaceQuery, type Page, type PageProps } from "../router.ts";
import { RUN_STATUSES } from "../../../testrun/runs/status.ts";
import { canReadTests, canRunTests, deviceCounts, duration, isFinal, LOCAL_DEVICE, PatternHelp, RepeatDialog, RUN_STREAM, StatusBadge, type RunEvents, whereOf } from "../testruns.tsx";
import type { TestConfig, TestRun, TestTargets } from "../../../testrun/schema.ts";
import { Field, Modal, ModalButtons, PageHeader, Show, Table, Time, useAction, useEventSource, useLoad, type TableProps } from "../ui.tsx";

const LIMIT = 25;

function Runs({ me, query }: PageProps) {
  const config = query.get("config") ?? "";
  const status = query.get("status") ?? "";
  const offset = Number(query.get("offset") ?? 0) || 0;
  const write = canRunTests(me);
  const configs = useLoad(() => api.get("/api/v1/configs"));
  const runs = useLoad(() => api.page("/api/v1/test-runs", { order: "desc", limit: LIMIT, offset, config_name: config || undefined, status: status || undefined }), [config, status, offset]);
  const [dialog, setDialog] = useState<string | undefined>(query.get("trigger") ?? undefined);
  const [repeatOf, setRepeatOf] = useState<TestRun>();

  // Live: a changed run on this page is replaced at once; a new or deleted one reloads the page.
  const reloadSoon = useDebouncedCall(runs.reload, 300);
  const live = useEventSource<RunEvents>(
    RUN_STREAM,
    {
      run: (run) => {
        const page = runs.data;
        if (!page) return;
        const at = page.items.findIndex((r) => r.id === run.id);
        const matches = (!config || run.config_name === config) && (!status || status.split(",").includes(run.status));
        if (at >= 0 && matches) {
          const items = [...page.items];
          items[at] = run;
          runs.setData({ ...page, items });
        } else if (at >= 0 || (matches && offset === 0)) reloadSoon();
      },
      "run-deleted": ({ id }) => {
        if (runs.data?.items.some((r) => r.id === id)) reloadSoon();
      },
    },
    runs.reload,
  );

  const filter = (next: Record<string, string | undefined>) => replaceQuery({ config, status, ...next, offset: undefined });

  return (
    <>
      <PageHeader
        title="Test runs"
        sub={
          <>
            Newest first. Status changes show as they happen{" "}
            <span class={`stream-dot inline ${live ? "on" : ""}`} title={live ? "Live" : "Reconnecting"} />.
          </>
        }
      >
        {write && (
          <button type="button" class="primary" onClick={() => setDialog("")}>
            Start a run…
          </button>
        )}
      </PageHeader>
      <div class="row filters">
        <label class="field-inline">
          Config{" "}
          <select aria-label="Filter by config" value={config} onChange={(e) => filter({ config: (e.target as HTMLSelectElement).value })}>
            <option value="">all</option>
            {(configs.data ?? []).map((c) => (
              <option key={c.name} value={c.name}>
                {c.name}
              </option>
            ))}
            {config && !(configs.data ?? []).some((c) => c.name === config) && <option value={config}>{config}</option>}
          </select>
        </label>
        <label class="field-inline">
          Status{" "}
          <select aria-label="Filter by status" value={status} onChange={(e) => filter({ status: (e.target as HTMLSelectElement).value })}>
            <option value="">all</option>
            <option value="pending,running">pending or running</option>
            {RUN_STATUSES.map((s) => (
              <option key={s} value={s}>
                {s}
              </option>
            ))}
          </select>
        </label>
      </div>
      <Show loaded={runs}>
        {(page) => (
          <RunTable
            runs={page.items}
            write={write}
            onRepeat={setRepeatOf}
            onChanged={runs.reload}
            empty={config || status ? "No run matches these filters." : write ? "No runs yet: start one." : "No runs yet."}
            pager={{ offset, limit: LIMIT, total: page.total, onChange: (o) => replaceQuery({ config, status, offset: o || undefined }) }}
          />
        )}
      </Show>
      {dialog !== undefined && <TriggerDialog configs={configs.data ?? []} initial={dialog} onClose={() => setDialog(undefined)} />}
      {repeatOf && <RepeatDialog run={repeatOf} onClose={() => setRepeatOf(undefined)} />}
    </>
  );
}

/** Calls `fn` once, `ms` after the last request (many events in a burst reload once). */
function useDebouncedCall(fn: () => void, ms: number): () => void {
  const timer = useRef<ReturnType<typeof setTimeout> | undefined>(undefined);
  useEffect(() => () => clearTimeout(timer.current), []);
  return () => {
    clearTimeout(timer.current);
    timer.current = setTimeout(fn, ms);
  };
}

function RunTable(props: { runs: TestRun[]; write: boolean; onRepeat: (run: TestRun) => void; onChanged: () => void; empty: string; pager: TableProps<TestRun>["pager"] }) {
  const [busy, run] = useAction();
  const abort = (r: TestRun) =>
    run(() => api.delete("/api/v1/test-runs/:id", { id: r.id }), {
      confirm: [`Abort this run of ${r.config_name}?`, { body: "A running case gets SIGTERM (SIGKILL 5 s later) and is reported as skipped; the cases that ran stay in the report.", confirm: "Abort run" }],
      done: "Abort requested",
    });
  const remove = async (r: TestRun) => {
    if (
      await run(() => api.delete("/api/v1/test-runs/:id/record", { id: r.id }), {
        confirm: [`Delete this run of ${r.config_name}?`, { body: "Its report and artifacts are deleted too.", confirm: "Delete run" }],
        done: "Run deleted",
      })
    )
      props.onChanged();
  };
  return (
    <Table
      rows={props.runs}
      rowKey={(r) => r.id}
      rowAttrs={(r) => ({ "data-run": r.id })}
      empty={props.empty}
      pager={props.pager}
      columns={[
        {
          head: "Status",
          cell: (r) => (
            <a href={href(`/runs/${seg(r.id)}`)} aria-label={`Run ${r.id}`}>
              <StatusBadge status={r.status} aborting={r.abort_requested} />
            </a>
          ),
        },
        {
          head: "Config",
          cell: (r) => (
            <>
              <a class="mono" href={href(`/runs/${seg(r.id)}`)}>
                {r.config_name}
              </a>
              {r.pattern && <div class="muted small mono">-k {r.pattern}</div>}
            </>
          ),
        },
        { head: "Suite", class: "hide-narrow", cell: (r) => r.test_suite_name || <span class="muted">all</span> },
        {
          head: "Where",
          class: "hide-narrow",
          cell: (r) => (
            <>
              {whereOf(r)}
              {r.machine_target === "localhost" && (
                <div class="small">
                  <a href={href(`/triggers/${seg(r.trigger_id)}`)}>multi-node trigger</a>
                </div>
              )}
            </>
          ),
        },
        { head: "Created", cell: (r) => <Time value={r.created_at} /> },
        {
          head: "Finished",
          class: "hide-narrow",
          cell: (r) =>
            r.finished_at ? (
              <>
                <Time value={r.finished_at} />
                {r.started_at && <div class="muted small">took {duration(r.started_at, r.finished_at)}</div>}
              </>
            ) : (
              <span class="muted">–</span>
            ),
        },
        {
          head: "Cases",
          class: "hide-narrow",
          cell: (r) => {
            // Kept when a run ends; a device run's come from its devices while it runs.
            const counts = r.counts ?? deviceCounts(r);
            if (!counts) return <span class="muted" title={isFinal(r) ? "This run ended before its cases were counted, or without a report" : "Counted when the run ends"}>–</span>;
            return (
              <span data-counts>
                <span class="pass-count">{counts.passed.toLocaleString()} passed</span>
                {counts.failed > 0 && <span class="fail-count"> · {counts.failed.toLocaleString()} failed</span>}
              </span>
            );
          },
        },
        {
          head: "",
          class: "actions",
          cell: (r) => (
            <>
              {props.write && !isFinal(r) && (
                <button type="button" class="small danger" disabled={busy || r.abort_requested} onClick={() => abort(r)}>
                  Abort
                </button>
              )}
              {props.write && isFinal(r) && (
                <>
                  <button type="button" class="small" disabled={busy} onClick={() => props.onRepeat(r)}>
                    Repeat…
                  </button>{" "}
                  <button type="button" class="small danger" disabled={busy} onClick={() => remove(r)}>
                    Delete
                  </button>
                </>
              )}
            </>
          ),
        },
      ]}
    />
  );
}

interface OverrideRow {
  key: string;
  value: string;
}

/** A YAML scalar for a value typed in a row: numbers and booleans as they are, other text quoted when needed. */
const yamlValue = (text: string): string => {
  const t = text.trim();
  if (t === "" || /^(-?\d+(\.\d+)?|true|false|null)$/.test(t) || /^[[{"']/.test(t)) return t === "" ? '""' : t;
  return /[:#]|^[-?&*!|>%@`]/.test(t) ? JSON.stringify(t) : t;
};

/** The trigger form: config, suite, overrides (rows from the hints and free YAML), where. */
function TriggerDialog(props: { configs: TestConfig[]; initial: string; onClose: () => void }) {
  const [config, setConfig] = useState(props.initial || props.configs[0]?.name || "");
  const outline = useLoad(async () => {
    if (!config) return { suites: [] as string[], hints: [] as string[] };
    const [suites, hints] = await Promise.all([api.get("/api/v1/configs/:name/test-suites", { name: config }), api.get("/api/v1/configs/:name/override-hints", { name: config })]);
    return { suites, hints };
  }, [config]);
  const nodes = useLoad(() => api.get("/api/v1/test-nodes"));
  const [suite, setSuite] = useState("");
  const [rows, setRows] = useState<OverrideRow[]>([]);
  const [free, setFree] = useState("");
  const [pattern, setPattern] = useState("");
  const [where, setWhere] = useState<"here" | "nodes" | "target" | "devices">("here");
  const targets = useLoad(() => api.get("/api/v1/test-targets"));
  const [kind, setKind] = useState<"group" | "tag" | "device">("group");
  const [place, setPlace] = useState("");
  const places = (t: TestTargets | undefined): Array<{ value: string; label: string }> =>
    !t
      ? []
      : kind === "group"
        ? t.groups.map((g) => ({ value: g.name, label: `${g.name} (${g.devices} device${g.devices === 1 ? "" : "s"})` }))
        : kind === "tag"
          ? t.tags.map((g) => ({ value: g.tag, label: `${g.tag} (${g.devices} device${g.devices === 1 ? "" : "s"})` }))
          : t.devices.map((d) => ({ value: d.mac_address, label: d.name === d.mac_address ? d.name : `${d.name} (${d.mac_address})` }));
  const devicePlace = place || places(targets.data)[0]?.value || "";
  const [picked, setPicked] = useState<Set<string>>(new Set([LOCAL_DEVICE]));
  const [target, setTarget] = useState("");
  const [error, setError] = useState<string>();
  const [busy, setBusy] = useState(false);

  useEffect(() => {
    setSuite("");
    setRows([]);
  }, [config]);

  const overrides = () =>
    [...rows.filter((r) => r.key.trim()).map((r) => `${r.key.trim()}: ${yamlValue(r.value)}`), free.trim()].filter(Boolean).join("\n");

  const submit = async (e: Event) => {
    e.preventDefault();
    setError(undefined);
    setBusy(true);
    const body: Record<string, unknown> = { config_name: config };
    if (suite) body.test_suite_name = suite;
    const o = overrides();
    if (o) body.overrides = o;
    if (pattern.trim()) body.pattern = pattern.trim();
    if (where === "nodes") body.nodes = [...picked];
    if (where === "target" && target.trim()) body.machine_target = target.trim();
    if (where === "devices") body.machine_target = `${kind}:${devicePlace}`;
    try {
      const res = await call("POST", "/api/v1/test-runs", { json: body });
      const trigger = res.headers.get("x-trigger-id");
      const answer = (await res.json()) as Partial<TestRun>;
      props.onClose();
      if (answer.id) navigate(`/runs/${seg(answer.id)}`);
      else if (trigger) navigate(`/triggers/${seg(trigger)}`);
    } catch (err) {
      setError(messageOf(err));
    } finally {
      setBusy(false);
    }
  };

  const hints = outline.data?.hints ?? [];
  return (
    <Modal title="Start a test run" onClose={props.onClose} wide>
      <form onSubmit={submit} class="trigger-form">
        <div class="form-row">
          <Field label="Config" wide>
            <select name="config_name" value={config} onChange={(e) => setConfig((e.target as HTMLSelectElement).value)} required>
              {props.configs.map((c) => (
                <option key={c.name} value={c.name}>
                  {c.name}
                </option>
              ))}
            </select>
          </Field>
          <Field label="Suite" wide>
            <select name="test_suite_name" value={suite} onChange={(e) => setSuite((e.target as HTMLSelectElement).value)}>
              <option value="">everything (all groups)</option>
              {(outline.data?.suites ?? []).map((s) => (
                <option key={s} value={s}>
                  {s}
                </option>
              ))}
            </select>
          </Field>
        </div>
        {outline.error && <p class="form-error">This config does not load: {outline.error}</p>}

        <fieldset class="plain">
          <legend class="field-label">Overrides</legend>
          {rows.map((row, i) => (
            <div class="form-row override-row" key={i}>
              <input
                aria-label="Override key"
                class="mono grow"
                list="override-hints"
                placeholder="tests.group.0.module.key"
                value={row.key}
                onInput={(e) => setRows(rows.map((r, j) => (j === i ? { ...r, key: (e.target as HTMLInputElement).value } : r)))}
              />
              <input
                aria-label="Override value"
                class="mono"
                placeholder="value"
                value={row.value}
                onInput={(e) => setRows(rows.map((r, j) => (j === i ? { ...r, value: (e.target as HTMLInputElement).value } : r)))}
              />
              <button type="button" class="small" aria-label="Remove override" onClick={() => setRows(rows.filter((_, j) => j !== i))}>
                ×
              </button>
            </div>
          ))}
          <datalist id="override-hints">
            {hints.map((h) => (
              <option key={h} value={h} />
            ))}
          </datalist>
          <div class="row">
            <button type="button" class="small" onClick={() => setRows([...rows, { key: hints.find((h) => !rows.some((r) => r.key === h)) ?? "", value: "" }])}>
              + Override
            </button>
            <span class="hint">{hints.length > 0 ? `This config suggests: ${hints.join(", ")}` : "This config declares no override hints; any dotted path works."}</span>
          </div>
          <details class="free-yaml">
            <summary class="small">Free YAML (one `dotted.path: value` a line)</summary>
            <textarea name="overrides" rows={3} value={free} onInput={(e) => setFree((e.target as HTMLTextAreaElement).value)} placeholder="tests.net.0.ping.host: 10.0.0.7" />
          </details>
        </fieldset>

        <Field label="Only cases matching (optional)" hint={<PatternHelp />} wide>
          <input name="pattern" class="mono" value={pattern} onInput={(e) => setPattern((e.target as HTMLInputElement).value)} placeholder="test_config1 or stdout" />
        </Field>

        <fieldset class="plain">
          <legend class="field-label">Where</legend>
          <div class="checks column">
            <label>
              <input type="radio" name="where" checked={where === "here"} onChange={() => setWhere("here")} /> On this gateway (entries with <code>machines:</code> go to those nodes or devices)
            </label>
            <label>
              <input type="radio" name="where" checked={where === "nodes"} onChange={() => setWhere("nodes")} /> On several nodes at once, each running everything
            </label>
            {where === "nodes" && (
              <div class="checks indent" role="group" aria-label="Nodes">
                {[LOCAL_DEVICE, ...(nodes.data ?? []).map((n) => n.name)].map((n) => (
                  <label key={n}>
                    <input
                      type="checkbox"
                      value={n}
                      checked={picked.has(n)}
                      onChange={() => {
                        const next = new Set(picked);
                        if (next.has(n)) next.delete(n);
                        else next.add(n);
                        setPicked(next);
                      }}
                    />
                    {n === LOCAL_DEVICE ? "this gateway" : n}
                  </label>
                ))}
                <span class="hint">The config must be on each node: copy it from the Configs page.</span>
              </div>
            )}
            <label>
              <input type="radio" name="where" checked={where === "target"} onChange={() => setWhere("target")} /> As a node role (<code>machine_target</code>: only the entries for that machine)
            </label>
            {where === "target" && <input aria-label="Machine target" class="mono indent" value={target} onInput={(e) => setTarget((e.target as HTMLInputElement).value)} placeholder="localhost or a machine name" />}
            <label>
              <input type="radio" name="where" checked={where === "devices"} onChange={() => setWhere("devices")} /> On managed devices (their agents run the entries without <code>machines:</code>)
            </label>
            {where === "devices" && (
              <div class="form-row indent" role="group" aria-label="Devices">
                <select aria-label="Run on" value={kind} onChange={(e) => (setKind((e.target as HTMLSelectElement).value as typeof kind), setPlace(""))}>
                  <option value="group">every device of a group</option>
                  <option value="tag">every device with a tag</option>
                  <option value="device">one device</option>
                </select>
                <select aria-label={kind === "group" ? "Group" : kind === "tag" ? "Tag" : "Device"} class="grow" value={devicePlace} onChange={(e) => setPlace((e.target as HTMLSelectElement).value)}>
                  {places(targets.data).map((p) => (
                    <option key={p.value} value={p.value}>
                      {p.label}
                    </option>
                  ))}
                </select>
                <span class="hint">
                  {targets.error
                    ? targets.error
                    : places(targets.data).length === 0
                      ? `No ${kind} you may run tests on (it takes the test permission on its devices).`
                      : kind === "device" && targets.data && targets.data.total > targets.data.devices.length
                        ? `The first ${targets.data.devices.length} of ${targets.data.total} devices; a group or tag reaches them all.`
                        : "Only devices you hold the test permission on are offered. Each device's agent must have tests enabled."}
                </span>
              </div>
            )}
          </div>
        </fieldset>

        <ModalButtons error={error} onCancel={props.onClose} submit={busy ? "Starting…" : "Start run"} disabled={busy || !config || (where === "nodes" && picked.size === 0) || (where === "devices" && !devicePlace)} />
      </form>
    </Modal>
  );
}

export const runsPage: Page = {
  path: "/runs",
  title: "Test runs",
  component: Runs,
  nav: { section: "Test runs", label: "Test runs", order: 20 },
  visible: canReadTests,
};
