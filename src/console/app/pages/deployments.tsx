/*
 * Deployments (README "Deployments"): the list, the New deployment dialog and one deployment's
 * page with its phases, counts and devices, which move live with the `deployment` and
 * `deployment_device` events of /api/stream.
 */
import { useEffect, useMemo, useRef, useState } from "preact/hooks";
import { api, seg } from "../api.ts";
import { href, navigate, replaceQuery, type Page, type PageProps } from "../router.ts";
import { prefixOf } from "../session.ts";
import type { Group } from "../../../update/groups/schema.ts";
import type { Counts, Deployment, DeploymentPreflight, DeviceState as State } from "../../../update/deployments/schema.ts";
import type { Package } from "../../../update/packages/schema.ts";
import { groupName } from "../update.ts";
import { AttemptConsole, useDeploymentEvents } from "../rollouts.tsx";
import { StackedChart } from "../chart.tsx";
import { Badge, Card, Field, Modal, ModalButtons, PageHeader, ProgressBar, Show, Table, Time, useAction, useFormErrors, useLoad } from "../ui.tsx";

/** The test run a device failed its validation in (docs/device-tests.md: its output ends with the run's console link). */
const validationRun = (m: { reason: string | null; output: string | null }): string | undefined =>
  m.reason === "validation" ? /\/#\/runs\/([0-9a-f-]{36})\s*$/.exec(m.output ?? "")?.[1] : undefined;

/** Labels and colours of the states (the stacked bars and the badges agree). */
const LOOK: Record<State, { label: string; tone: "ok" | "warn" | "bad" | "info" | "muted"; color: string }> = {
  waiting: { label: "waiting", tone: "muted", color: "#d0d5dd" },
  // Someone holds the board (docs/lab.md): neither failed nor late, a colour of its own.
  reserved: { label: "reserved", tone: "muted", color: "#0e9384" },
  offered: { label: "offered", tone: "info", color: "#9db7f5" },
  downloading: { label: "downloading", tone: "info", color: "#2458d6" },
  installing: { label: "installing", tone: "info", color: "#6938ef" },
  installed: { label: "installed", tone: "ok", color: "#16794a" },
  retrying: { label: "retrying", tone: "warn", color: "#f38744" },
  failed: { label: "failed", tone: "bad", color: "#b42318" },
  already_installed: { label: "already installed", tone: "ok", color: "#6cc08b" },
  no_package: { label: "no package", tone: "warn", color: "#e0a03a" },
  not_reached: { label: "not reached", tone: "warn", color: "#a15c00" },
  aborted: { label: "aborted", tone: "muted", color: "#667085" },
};

/** The states in the order the bars and the filter show them. */
const STATES = Object.keys(LOOK) as State[];

const STATUS_TONE: Record<Exclude<Deployment["status"], "completed_with_failures">, "ok" | "warn" | "bad" | "info" | "muted"> = {
  scheduled: "muted",
  running: "info",
  paused: "warn",
  completed: "ok",
  aborted: "bad",
};
const STATUSES: Deployment["status"][] = ["scheduled", "running", "paused", "completed", "completed_with_failures", "aborted"];
const statusLabel = (status: Deployment["status"]) => status.replaceAll("_", " ");

export function StatusBadge(props: { status: Deployment["status"] }) {
  // Ended, but not everywhere: a colour of its own, neither the green of completed nor the red of aborted.
  if (props.status === "completed_with_failures") return <span class="badge badge-partial">{statusLabel(props.status)}</span>;
  return <Badge tone={STATUS_TONE[props.status]}>{props.status}</Badge>;
}

export function StateBadge(props: { state: State }) {
  return <Badge tone={LOOK[props.state].tone}>{LOOK[props.state].label}</Badge>;
}

/** One bar, a segment per state in proportion to its devices (hover: the numbers). */
export function StateBar(props: { counts: Counts; total: number; wide?: boolean }) {
  const parts = STATES.filter((s) => props.counts[s] > 0);
  const summary = parts.map((s) => `${props.counts[s]} ${LOOK[s].label}`).join(", ") || "no devices";
  return (
    <span class={`state-bar ${props.wide ? "wide" : ""}`} role="img" aria-label={summary} title={summary}>
      {parts.map((s) => (
        <span key={s} class="state-seg" data-state={s} style={{ width: `${(props.counts[s] * 100) / Math.max(1, props.total)}%`, background: LOOK[s].color }} />
      ))}
    </span>
  );
}

function Legend(props: { counts: Counts }) {
  return (
    <div class="state-legend">
      {STATES.filter((s) => props.counts[s] > 0).map((s) => (
        <span key={s} class="small">
          <span class="swatch" style={{ background: LOOK[s].color }} /> {LOOK[s].label} <strong>{props.counts[s]}</strong>
        </span>
      ))}
    </div>
  );
}

/** The chart's series: every state, in the bars' order and colours. */
const SERIES = STATES.map((s) => ({ key: s, label: LOOK[s].label, color: LOOK[s].color }));
/** The timeline loads again at most this often while the deployment moves (it reads every device's history). */
const TIMELINE_EVERY = 2000;

/** The deployment's counts per state over time; loads again when `counts` (the live ones) change. */
function Progress(props: { id: number; counts: Counts }) {
  const timeline = useLoad(() => api.get("/api/v2/deployments/:id{[0-9]+}/timeline", { id: props.id }), [props.id]);
  const key = STATES.map((s) => props.counts[s]).join(",");
  const last = useRef(0);
  const seen = useRef(key);
  useEffect(() => {
    if (key === seen.current) return;
    seen.current = key;
    const wait = Math.max(0, last.current + TIMELINE_EVERY - Date.now());
    const timer = setTimeout(() => {
      last.current = Date.now();
      timeline.reload();
    }, wait);
    return () => clearTimeout(timer);
  }, [key]);
  return (
    <Card title="Progress over time" class="progress-card">
      <Show loaded={timeline}>
        {(t) => (
          <>
            <StackedChart label="Devices per state" series={SERIES} points={t.points.map((p) => ({ at: Date.parse(p.at), values: p.counts }))} />
            <p class="muted small">{t.step_minutes === 1 ? "Every minute since it was created." : `Every ${t.step_minutes} minutes since it was created.`}</p>
          </>
        )}
      </Show>
    </Card>
  );
}

const phaseText = (d: Deployment) => (d.current_phase < 0 ? "not started" : `${d.current_phase + 1} of ${d.phases.length}`);

// ---- the list -----------------------------------------------------------------------------

const PAGE = 50;

function Deployments({ query, me }: PageProps) {
  const status = query.get("status") ?? "";
  const offset = Number(query.get("offset") ?? 0) || 0;
  const [creating, setCreating] = useState(false);
  const list = useLoad(() => api.page("/api/v2/deployments", { limit: PAGE, offset, status: status || undefined }), [status, offset]);
  const groups = useLoad(() => api.get("/api/v2/groups"));
  const names = useMemo(() => new Map((groups.data ?? []).map((g) => [g.id, groupName(g)])), [groups.data]);
  useDeploymentEvents(() => true, list.reload);

  return (
    <>
      <PageHeader title="Deployments" sub="Roll a version out to a group in phases; pause, abort, and see every device's outcome.">
        <select aria-label="Status" value={status} onChange={(e) => replaceQuery({ status: e.currentTarget.value || undefined, offset: undefined })}>
          <option value="">all statuses</option>
          {STATUSES.map((s) => (
            <option key={s} value={s}>
              {statusLabel(s)}
            </option>
          ))}
        </select>
        <button type="button" class="primary" onClick={() => setCreating(true)}>
          New deployment
        </button>
      </PageHeader>
      <Show loaded={list}>
        {({ items, total }) => (
          <Table
            rows={items}
            rowKey={(d) => d.id}
            rowAttrs={(d) => ({ "data-deployment": d.id })}
            empty={status ? `No ${statusLabel(status as Deployment["status"])} deployments.` : "No deployments yet: start one with New deployment."}
            pager={{ offset, limit: PAGE, total, onChange: (o) => replaceQuery({ offset: o || undefined }) }}
            columns={[
              {
                head: "Deployment",
                cell: (d) => (
                  <>
                    <a href={href(`/deployments/${d.id}`)} class="strong">
                      #{d.id} · <span class="mono">{d.version}</span>
                    </a>
                    <div class="muted small">
                      to <a href={href(`/groups/${d.group}`)}>{names.get(d.group) ?? `Group ${d.group}`}</a>
                    </div>
                  </>
                ),
              },
              { head: "Phase", class: "nowrap", cell: (d) => phaseText(d) },
              {
                head: "Devices",
                cell: (d) => (
                  <>
                    <StateBar counts={d.counts} total={d.devices} />
                    <div class="muted small">
                      {d.counts.installed + d.counts.already_installed} of {d.devices} up to date{d.counts.failed > 0 ? ` · ${d.counts.failed} failed` : ""}
                    </div>
                  </>
                ),
              },
              { head: "Started", class: "hide-narrow", cell: (d) => (d.started ? <Time value={d.started} /> : d.start_at ? <span class="muted">at <Time value={d.start_at} /></span> : "–") },
              { head: "Status", cell: (d) => <StatusBadge status={d.status} /> },
            ]}
          />
        )}
      </Show>
      {creating && (
        <NewDeployment
          prefix={prefixOf(me)}
          onClose={() => setCreating(false)}
          onCreated={(d) => {
            setCreating(false);
            navigate(`/deployments/${d.id}`);
          }}
        />
      )}
    </>
  );
}

/** A version the New deployment dialog offers, with the device types its packages are for. */
interface VersionChoice {
  version: string;
  devtypes: string[];
}

/** The versions of the group's packages (a deployment offers those), or of every package before a group is chosen. */
function versionChoices(packages: readonly Package[], prefix: string, group: Group | undefined): VersionChoice[] {
  const types = new Map<string, Set<string>>();
  for (const p of packages) {
    if (group && !group.packages.includes(p.id)) continue;
    const version = String(p.metadata[`${prefix}.software.version`] ?? "");
    if (!version) continue;
    const set = types.get(version) ?? new Set();
    set.add(String(p.metadata[`${prefix}.hardware.devtype`] ?? "?"));
    types.set(version, set);
  }
  return [...types].map(([version, set]) => ({ version, devtypes: [...set].sort() })).sort((a, b) => a.version.localeCompare(b.version, undefined, { numeric: true }));
}

/** What the Version field says: what its list holds, or why it is empty and what to do. */
function versionHint(packages: readonly Package[] | undefined, group: Group | undefined, count: number) {
  if (packages === undefined) return undefined;
  if (packages.length === 0) return <>No packages yet: upload one on <a href={href("/packages")}>Packages</a>.</>;
  if (!group) return "Every uploaded version; choosing a group narrows it to the group's packages.";
  if (count === 0) return <>This group has no packages: assign some on <a href={href(`/groups/${group.id}`)}>its page</a>.</>;
  return "The versions of the group's packages.";
}

const DAYS = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"] as const;
type Day = (typeof DAYS)[number];

/** The New deployment dialog: group, version (from the group's packages), phases, gates, window, start. */
function NewDeployment(props: { prefix: string; onClose: () => void; onCreated: (d: Deployment) => void }) {
  const groups = useLoad(() => api.get("/api/v2/groups"));
  const packages = useLoad(() => api.get("/api/v1/packages"));
  const [groupId, setGroupId] = useState("");
  const errors = useFormErrors(["group", "version", "phases", "success_percent", "success_wait_minutes", "error_percent", "device_timeout_minutes", "retries", "retry_backoff_seconds", "start_at", "window.timezone"]);
  const [busy, setBusy] = useState(false);
  const [useWindow, setUseWindow] = useState(false);
  const [days, setDays] = useState<Day[]>(["mon", "tue", "wed", "thu", "fri"]);
  const group = groups.data?.find((g) => String(g.id) === groupId);
  const versions = useMemo(() => versionChoices(packages.data ?? [], props.prefix, group), [group, packages.data]);
  const [version, setVersion] = useState("");
  // A version the newly chosen group has no package of is no choice any more.
  const chosen = versions.some((v) => v.version === version) ? version : "";
  // Devices that require signatures and would refuse the version's packages: said before it starts.
  const preflight = useLoad(
    (): Promise<DeploymentPreflight> => (group && chosen ? api.get("/api/v2/deployments/preflight", { group: group.id, version: chosen }) : Promise.resolve({ warnings: [] })),
    [group?.id, chosen],
  );

  const submit = async (e: Event) => {
    e.preventDefault();
    const data = new FormData(e.currentTarget as HTMLFormElement);
    const text = (name: string) => String(data.get(name) ?? "").trim();
    const numberOrNull = (name: string) => (text(name) === "" ? null : Number(text(name)));
    const phases = text("phases")
      .split(/[\s,]+/)
      .filter(Boolean)
      .map((p) => (p.endsWith("d") ? { devices: Number(p.slice(0, -1)) } : Number(p.replace(/%$/, ""))));
    const body = {
      group: Number(groupId),
      version: chosen,
      phases,
      success_percent: text("gate") === "manual" ? null : numberOrNull("success_percent"),
      success_wait_minutes: numberOrNull("success_wait_minutes"),
      error_percent: numberOrNull("error_percent"),
      device_timeout_minutes: Number(text("device_timeout_minutes") || 1440),
      retries: Number(text("retries") || 0),
      retry_backoff_seconds: Number(text("retry_backoff_seconds") || 0),
      start_at: text("start_at") ? new Date(text("start_at")).toISOString() : null,
      window: useWindow ? { days, from: text("window_from"), to: text("window_to"), timezone: text("timezone") || "UTC" } : null,
    };
    setBusy(true);
    errors.set(undefined);
    try {
      props.onCreated(await api.post("/api/v2/deployments", {}, body));
    } catch (err) {
      errors.set(err);
    } finally {
      setBusy(false);
    }
  };

  return (
    <Modal title="New deployment" onClose={props.onClose} wide>
      <form onSubmit={submit} class="deployment-form">
        <div class="form-row top">
          <Field label="Group" error={errors.at("group")} wide>
            <select name="group" value={groupId} onChange={(e) => setGroupId(e.currentTarget.value)} required>
              <option value="">choose a group…</option>
              {(groups.data ?? []).map((g) => (
                <option key={g.id} value={g.id}>
                  {groupName(g)} ({g.devices.length} devices, policy {g.policy})
                </option>
              ))}
            </select>
          </Field>
          <Field label="Version" error={errors.at("version")} wide hint={versionHint(packages.data, group, versions.length)}>
            <select name="version" required value={chosen} onChange={(e) => setVersion(e.currentTarget.value)} disabled={packages.data !== undefined && versions.length === 0}>
              <option value="">{versions.length === 0 ? (packages.data === undefined ? "loading…" : "no versions") : "choose a version…"}</option>
              {versions.map((v) => (
                <option key={v.version} value={v.version}>
                  {v.version} ({v.devtypes.join(", ")})
                </option>
              ))}
            </select>
          </Field>
        </div>
        <div class="form-row">
          <Field label="Phases" error={errors.at("phases")} hint='Cumulative percents of the group, e.g. "5, 25, 100"; "2d" is a phase of 2 devices. The last is 100.'>
            <input name="phases" defaultValue="10, 50, 100" required style={{ width: "200px" }} />
          </Field>
          <Field label="Next phase">
            <select name="gate" defaultValue="auto">
              <option value="auto">automatically, when…</option>
              <option value="manual">only by hand</option>
            </select>
          </Field>
          <Field label="installed (%)" error={errors.at("success_percent")}>
            <input name="success_percent" type="number" min="0" max="100" defaultValue="90" style={{ width: "80px" }} />
          </Field>
          <Field label="and waited (min)" error={errors.at("success_wait_minutes")}>
            <input name="success_wait_minutes" type="number" min="0" placeholder="0" style={{ width: "90px" }} />
          </Field>
        </div>
        <div class="form-row">
          <Field label="Pause above failed (%)" error={errors.at("error_percent")} hint="Of the devices offered so far; empty: never.">
            <input name="error_percent" type="number" min="0" max="100" defaultValue="20" style={{ width: "90px" }} />
          </Field>
          <Field label="Device timeout (min)" error={errors.at("device_timeout_minutes")} hint="Not finished by then: not reached.">
            <input name="device_timeout_minutes" type="number" min="1" defaultValue="1440" style={{ width: "100px" }} />
          </Field>
          <Field label="Retries" error={errors.at("retries")} hint="After a failed install; then failed for good.">
            <input name="retries" type="number" min="0" max="10" defaultValue="2" style={{ width: "70px" }} />
          </Field>
          <Field label="first after (s)" error={errors.at("retry_backoff_seconds")} hint="Doubling each time.">
            <input name="retry_backoff_seconds" type="number" min="0" max="86400" defaultValue="300" style={{ width: "90px" }} />
          </Field>
          <Field label="Start at" error={errors.at("start_at")} hint="Empty: now.">
            <input name="start_at" type="datetime-local" />
          </Field>
        </div>
        <fieldset class="plain">
          <label class="check">
            <input type="checkbox" checked={useWindow} onChange={(e) => setUseWindow(e.currentTarget.checked)} /> Only inside a maintenance window
          </label>
          {useWindow && (
            <div class="form-row">
              <div class="field">
                <span class="field-label">Days</span>
                <div class="row">
                  {DAYS.map((d) => (
                    <label key={d} class="check small">
                      <input type="checkbox" checked={days.includes(d)} onChange={(e) => setDays(e.currentTarget.checked ? [...days, d] : days.filter((x) => x !== d))} /> {d}
                    </label>
                  ))}
                </div>
              </div>
              <Field label="From">
                <input name="window_from" type="time" defaultValue="22:00" required />
              </Field>
              <Field label="To">
                <input name="window_to" type="time" defaultValue="05:00" required />
              </Field>
              <Field label="Time zone" error={errors.at("window.timezone")}>
                <input name="timezone" defaultValue={Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC"} style={{ width: "160px" }} />
              </Field>
            </div>
          )}
        </fieldset>
        {(preflight.data?.warnings ?? []).map((w) => (
          <p key={`${w.code}-${w.package}`} class="small" data-preflight-warning={w.code}>
            <Badge tone="warn">{w.code === "unsigned_package" ? "unsigned" : "untrusted key"}</Badge> {w.message}
          </p>
        ))}
        <ModalButtons error={errors.foot} onCancel={props.onClose} submit={busy ? "Starting…" : "Start deployment"} disabled={busy || !group || !chosen} />
      </form>
    </Modal>
  );
}

// ---- one deployment -----------------------------------------------------------------------

const DEVICE_PAGE = 100;

function DeploymentView({ params, query }: PageProps) {
  const id = Number(params.id);
  const state = query.get("state") ?? "";
  const offset = Number(query.get("offset") ?? 0) || 0;
  const deployment = useLoad(() => api.get("/api/v2/deployments/:id{[0-9]+}", { id }), [id]);
  const members = useLoad(() => api.page("/api/v2/deployments/:id{[0-9]+}/devices", { id, limit: DEVICE_PAGE, offset, state: state || undefined }), [id, state, offset]);
  const groups = useLoad(() => api.get("/api/v2/groups"));
  // Boards keep each attempt's console span: shown beside the device's reason, folded.
  const spans = useLoad(() => api.get("/api/v2/deployments/:id{[0-9]+}/console-spans", { id }).catch(() => []), [id]);
  const spansOf = (m: { device: number; attempt: number }) => (spans.data ?? []).filter((s) => s.device_id === m.device && s.attempt === m.attempt);
  const [busy, run] = useAction();
  useDeploymentEvents((d) => d.deployment === id, () => {
    deployment.reload();
    members.reload();
    spans.reload();
  });

  const command = (name: "pause" | "resume" | "abort" | "advance" | "retry", done: string, confirm?: Parameters<typeof run>[1]) =>
    run(async () => deployment.setData(await api.post(`/api/v2/deployments/:id{[0-9]+}/${name}`, { id })), { done, ...confirm }).then(() => members.reload());

  return (
    <Show loaded={deployment}>
      {(d) => {
        const group = groups.data?.find((g) => g.id === d.group);
        const active = d.status === "running" || d.status === "paused" || d.status === "scheduled";
        return (
          <>
            <PageHeader
              title={
                <>
                  Deployment #{d.id}: <span class="mono">{d.version}</span> <StatusBadge status={d.status} />
                </>
              }
              sub={
                <>
                  <a href={href("/deployments")}>Deployments</a> / to <a href={href(`/groups/${d.group}`)}>{group ? groupName(group) : `Group ${d.group}`}</a> · created <Time value={d.created} />
                  {d.created_by ? ` by ${d.created_by}` : ""}
                </>
              }
            >
              {d.status === "running" && (
                <button type="button" disabled={busy} onClick={() => command("pause", "Paused: no new offers")}>
                  Pause
                </button>
              )}
              {d.status === "paused" && (
                <button type="button" class="primary" disabled={busy} onClick={() => command("resume", "Resumed")}>
                  Resume
                </button>
              )}
              {active && d.status !== "scheduled" && d.current_phase < d.phases.length - 1 && (
                <button
                  type="button"
                  disabled={busy}
                  onClick={() =>
                    command("advance", `Phase ${d.current_phase + 2} started`, {
                      confirm: [`Start phase ${d.current_phase + 2} of ${d.phases.length} now?`, { body: "Its devices are offered the version at their next check, whatever the current phase's gate says.", confirm: "Start next phase" }],
                    })
                  }
                >
                  Next phase
                </button>
              )}
              {d.counts.failed > 0 && d.status !== "aborted" && (
                <button
                  type="button"
                  disabled={busy}
                  onClick={() =>
                    command("retry", `${d.counts.failed} failed device${d.counts.failed === 1 ? "" : "s"} retried`, {
                      confirm: [
                        `Retry the ${d.counts.failed} failed device${d.counts.failed === 1 ? "" : "s"}?`,
                        { body: `Each is offered ${d.version} again at its next check, with ${d.retries} retr${d.retries === 1 ? "y" : "ies"} after a failure.${active ? "" : " The deployment runs again until they finish."}`, confirm: "Retry failed" },
                      ],
                    })
                  }
                >
                  Retry failed
                </button>
              )}
              {active && (
                <button
                  type="button"
                  class="danger"
                  disabled={busy}
                  onClick={() =>
                    command("abort", "Deployment aborted", {
                      confirm: [`Abort deployment #${d.id}?`, { body: "No device is offered the version any more; devices downloading it are told to stop. The group's policy stays as it was.", confirm: "Abort", danger: true }],
                    })
                  }
                >
                  Abort
                </button>
              )}
            </PageHeader>
            {d.status === "paused" && d.pause_reason && (
              <div class="error-box" role="status">
                <strong>Paused:</strong> {d.pause_reason}
              </div>
            )}
            {d.gate === "stuck" && d.status === "running" && (
              <div class="note-box" role="status">
                Phase {d.current_phase + 1} finished below its gate ({d.success_percent === null ? "the next phase starts only by hand" : `${d.success_percent}% must install`}): start the next phase with <em>Next phase</em>, or abort.
              </div>
            )}
            <div class="grid2">
              <Card title="Devices">
                <StateBar counts={d.counts} total={d.devices} wide />
                <Legend counts={d.counts} />
                <dl class="props">
                  <dt>Phase</dt>
                  <dd>{phaseText(d)}</dd>
                  <dt>Next phase</dt>
                  <dd>
                    {d.success_percent === null ? "by hand" : `when ${d.success_percent}% installed`}
                    {d.success_wait_minutes ? ` and ${d.success_wait_minutes} min passed` : ""}
                  </dd>
                  <dt>Pauses</dt>
                  <dd>{d.error_percent === null ? "never on errors" : `above ${d.error_percent}% failed`}</dd>
                  <dt>Device timeout</dt>
                  <dd>{d.device_timeout_minutes} min</dd>
                  <dt>Retries</dt>
                  <dd>
                    {d.retries === 0 ? "none: one failure is final" : `${d.retries} after a failure, the first after ${d.retry_backoff_seconds} s (doubling)`}
                  </dd>
                  {d.window && (
                    <>
                      <dt>Window</dt>
                      <dd>
                        {d.window.days.join(", ")} {d.window.from}–{d.window.to} {d.window.timezone} {d.window_open ? <Badge tone="ok">open</Badge> : <Badge>closed</Badge>}
                      </dd>
                    </>
                  )}
                  <dt>Started</dt>
                  <dd>{d.started ? <Time value={d.started} /> : d.start_at ? <>at <Time value={d.start_at} /></> : "–"}</dd>
                  {d.finished && (
                    <>
                      <dt>Finished</dt>
                      <dd>
                        <Time value={d.finished} />
                      </dd>
                    </>
                  )}
                </dl>
              </Card>
              <Card title="Phases">
                <table class="table phases">
                  <tbody>
                    {d.phases.map((p) => (
                      <tr key={p.index} data-phase={p.index} class={p.index === d.current_phase && active ? "current" : ""}>
                        <td class="nowrap">
                          <strong>Phase {p.index + 1}</strong>
                          <div class="muted small">{p.started ? <Time value={p.started} /> : "not started"}</div>
                        </td>
                        <td>
                          <StateBar counts={p.counts} total={p.devices} />
                          <div class="muted small">
                            {p.succeeded} of {p.devices} installed{p.counts.failed ? ` · ${p.counts.failed} failed` : ""}
                          </div>
                        </td>
                      </tr>
                    ))}
                  </tbody>
                </table>
              </Card>
            </div>
            <Progress id={d.id} counts={d.counts} />
            <Card
              title="Devices in this deployment"
              actions={
                <select aria-label="State" value={state} onChange={(e) => replaceQuery({ state: e.currentTarget.value || undefined, offset: undefined })}>
                  <option value="">every state</option>
                  {STATES.map((s) => (
                    <option key={s} value={s}>
                      {LOOK[s].label} ({d.counts[s]})
                    </option>
                  ))}
                </select>
              }
            >
              <Show loaded={members}>
                {({ items, total }) => (
                  <Table
                    rows={items}
                    rowKey={(m) => m.device}
                    rowAttrs={(m) => ({ "data-device": m.device, "data-state": m.state })}
                    empty="No devices in this state."
                    pager={{ offset, limit: DEVICE_PAGE, total, onChange: (o) => replaceQuery({ offset: o || undefined }) }}
                    columns={[
                      {
                        head: "Device",
                        cell: (m) => (
                          <>
                            <a href={href(`/devices/${m.device}`)}>{m.name || m.mac_address}</a>
                            <div class="muted small mono">{m.mac_address}</div>
                          </>
                        ),
                      },
                      { head: "Phase", class: "nowrap", cell: (m) => m.phase + 1 },
                      {
                        head: "State",
                        cell: (m) => (
                          <>
                            <StateBadge state={m.state} />
                            {m.attempt > 1 && <span class="muted small"> attempt {m.attempt}</span>}
                            {m.state === "retrying" && m.retry_at && (
                              <div class="muted small">
                                next try <Time value={m.retry_at} />
                              </div>
                            )}
                            {m.state === "downloading" && m.progress !== null && (
                              <div class="progress-cell">
                                <ProgressBar value={m.progress} label={`download of ${m.name}`} />
                              </div>
                            )}
                          </>
                        ),
                      },
                      { head: "From", class: "mono hide-narrow", cell: (m) => m.from_version ?? "–" },
                      {
                        head: "Reason",
                        cell: (m) =>
                          m.reason || spansOf(m).length > 0 ? (
                            <>
                              {m.reason && <span class={m.state === "failed" ? "bad-text" : ""}>{m.reason}</span>}
                              {validationRun(m) && (
                                <>
                                  {" "}
                                  <a class="small" href={href(`/runs/${seg(validationRun(m)!)}`)}>
                                    the test run ›
                                  </a>
                                </>
                              )}
                              {m.output && (
                                <details class="output">
                                  <summary class="small">output</summary>
                                  <pre>{m.output}</pre>
                                </details>
                              )}
                              {spansOf(m).map((span) => (
                                <AttemptConsole key={span.history_id} deviceId={m.device} entry={span.history_id} bytes={span.bytes} />
                              ))}
                            </>
                          ) : (
                            <span class="muted">–</span>
                          ),
                      },
                      { head: "Updated", class: "hide-narrow", cell: (m) => <Time value={m.updated} /> },
                    ]}
                  />
                )}
              </Show>
            </Card>
          </>
        );
      }}
    </Show>
  );
}

export const deploymentsPage: Page = { path: "/deployments", title: "Deployments", component: Deployments, nav: { section: "Update server", label: "Deployments", order: 35 } };
export const deploymentPage: Page = { path: "/deployments/:id", title: "Deployment", component: DeploymentView };
