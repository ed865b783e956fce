/**
 * Pieces the test-run pages share (Configs, Test runs, a run, a trigger, Nodes): the API's shapes,
 * who may do what, the live run stream, status badges, the YAML view and the -k pattern help.
 */
import type { ComponentChildren } from "preact";
import { useEffect, useState } from "preact/hooks";
import { api, messageOf, seg } from "./api.ts";
import { navigate } from "./router.ts";
import { hasScope, isAdmin, type Me } from "./session.ts";
import { Badge, Field, Modal, ModalButtons } from "./ui.tsx";
import { isFinalStatus } from "../../testrun/runs/status.ts";
import type { ReportRow, StatusCounts, TestRun } from "../../testrun/schema.ts";
import type { RunStreamEventData } from "../../protocol/streams.ts";

/** Where a run ran, in words: its devices, a node role, or this gateway. */
export const whereOf = (r: Pick<TestRun, "machine_target" | "devices">): string => {
  if (r.devices) return `${r.devices.length === 1 ? r.devices[0]!.name : `${r.devices.length} devices`}${r.machine_target ? ` (${r.machine_target})` : ""}`;
  return r.machine_target && r.machine_target !== "localhost" ? `node role ${r.machine_target}` : "this gateway";
};

/** "Local device": this gateway in node lists (the server's name for it). */
export const LOCAL_DEVICE = "Local device";

/** How long a run took: "12 s", "3 min 4 s". */
export const duration = (from: string, to: string): string => {
  const s = Math.max(0, (new Date(to).getTime() - new Date(from).getTime()) / 1000);
  return s < 60 ? `${s.toFixed(0)} s` : `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
};

/** A run on devices: its cases' counts over the devices so far (a run here has them in its report only). */
export const deviceCounts = (r: Pick<TestRun, "devices">): { passed: number; failed: number } | undefined =>
  r.devices?.reduce((sum, d) => ({ passed: sum.passed + d.passed, failed: sum.failed + d.failed }), { passed: 0, failed: 0 });

export const canReadTests = (me: Me) => isAdmin(me) || hasScope(me, "tests_ro") || hasScope(me, "tests_rw");
export const canRunTests = (me: Me) => hasScope(me, "admin_rw") || hasScope(me, "tests_rw");

export const isFinal = (run: Pick<TestRun, "status">) => isFinalStatus(run.status);

/** Where a run's API lives: here, or on a lab node through this gateway. */
export const runBase = (id: string, node?: string) => (node ? `/api/v1/test-nodes/${seg(node)}/test-runs/${seg(id)}` : `/api/v1/test-runs/${seg(id)}`);

/** A run, here or on a lab node (read through this gateway). */
export const runOf = (id: string, node?: string) => (node ? api.get("/api/v1/test-nodes/:node/test-runs/:id", { node, id }) : api.get("/api/v1/test-runs/:id", { id }));

/** A run's artifact files, here or on a lab node. */
export const artifactsOf = (id: string, node?: string) =>
  node ? api.get("/api/v1/test-nodes/:node/test-runs/:id/artifacts", { node, id }) : api.get("/api/v1/test-runs/:id/artifacts", { id });

const TONES: Record<string, "ok" | "warn" | "bad" | "info" | "muted"> = { pending: "muted", running: "info", finished: "ok", failed: "bad", aborted: "warn", passed: "ok", skipped: "muted" };

/** A run's (or a case's) status as a coloured badge; a running run being aborted says so. */
export function StatusBadge(props: { status: string; aborting?: boolean }) {
  const label = props.aborting && props.status === "running" ? "aborting…" : props.status;
  return (
    <span data-status={props.status}>
      <Badge tone={TONES[props.status] ?? "muted"}>{label}</Badge>
    </span>
  );
}

// ---- live run changes ------------------------------------------------------------------------

/** GET /api/v1/test-runs/stream: each run's and trigger's changes (follow with useEventSource). */
export const RUN_STREAM = "/api/v1/test-runs/stream";

/** The events of RUN_STREAM and their data. */
export type RunEvents = RunStreamEventData;

// ---- YAML ----------------------------------------------------------------------------------------

/** One line of YAML as highlighted spans: comments, keys, strings, numbers and booleans, anchors and aliases. */
function yamlLine(line: string): ComponentChildren {
  const out: ComponentChildren[] = [];
  let rest = line;
  const indent = /^(\s*(?:-\s+)*)/.exec(rest)![1]!;
  if (indent) {
    out.push(<span class="y-punct">{indent}</span>);
    rest = rest.slice(indent.length);
  }
  const key = /^((?:"[^"]*"|'[^']*'|[^\s#'"][^:#]*?)):(\s|$)/.exec(rest);
  if (key) {
    out.push(<span class="y-key">{key[1]}</span>, ":");
    rest = rest.slice(key[1]!.length + 1);
  }
  // The value, and a comment after it (a # after a blank, outside quotes).
  let value = rest;
  let comment = "";
  let quote = "";
  for (let i = 0; i < rest.length; i++) {
    const ch = rest[i]!;
    if (quote) {
      if (ch === quote) quote = "";
    } else if (ch === '"' || ch === "'") quote = ch;
    else if (ch === "#" && (i === 0 || /\s/.test(rest[i - 1]!))) {
      value = rest.slice(0, i);
      comment = rest.slice(i);
      break;
    }
  }
  const trimmed = value.trim();
  const cls = /^[&*][\w.-]+/.test(trimmed)
    ? "y-anchor"
    : /^(["']).*\1$/.test(trimmed)
      ? "y-string"
      : /^(-?\d[\d_.]*|0x[\da-f]+|true|false|yes|no|on|off|null|~)$/i.test(trimmed)
        ? "y-number"
        : trimmed === "|" || trimmed === ">"
          ? "y-punct"
          : "";
  if (value) out.push(cls ? <span class={cls}>{value}</span> : value);
  if (comment) out.push(<span class="y-comment">{comment}</span>);
  return out;
}

/**
 * A YAML text with line numbers and highlighting; `mark` is a line to point at (a problem),
 * `marks` lines to tint (e.g. where override hints are).
 */
export function YamlView(props: { text: string; mark?: number | undefined; marks?: ReadonlySet<number>; id?: string }) {
  const lines = props.text.replace(/\n$/, "").split("\n");
  useEffect(() => {
    if (props.mark) document.getElementById(`${props.id ?? "yaml"}-L${props.mark}`)?.scrollIntoView({ block: "center" });
  }, [props.mark, props.text]);
  return (
    <pre class="yaml" aria-label="YAML">
      {lines.map((line, i) => {
        const n = i + 1;
        const cls = n === props.mark ? "y-line y-mark" : props.marks?.has(n) ? "y-line y-hint" : "y-line";
        return (
          <div key={n} class={cls} id={`${props.id ?? "yaml"}-L${n}`}>
            <span class="y-no" aria-hidden="true">
              {n}
            </span>
            <span class="y-text">{yamlLine(line)}</span>
          </div>
        );
      })}
    </pre>
  );
}

/** The names under `includes:` (block or flow form), with the line of each, read from the text. */
export function includesOf(text: string): Array<{ name: string; line: number }> {
  const lines = text.split("\n");
  const out: Array<{ name: string; line: number }> = [];
  const start = lines.findIndex((l) => /^includes\s*:/.test(l));
  if (start < 0) return out;
  const inline = /^includes\s*:\s*(.+)$/.exec(lines[start]!)?.[1]?.replace(/#.*$/, "").trim();
  const clean = (s: string) => s.trim().replace(/^["']|["']$/g, "");
  if (inline) {
    for (const name of inline.replace(/^\[|\]$/g, "").split(",").map(clean)) if (name) out.push({ name, line: start + 1 });
    return out;
  }
  for (let i = start + 1; i < lines.length; i++) {
    const item = /^\s*-\s*(.+?)\s*(#.*)?$/.exec(lines[i]!);
    if (item) out.push({ name: clean(item[1]!), line: i + 1 });
    else if (/^\S/.test(lines[i]!)) break;
  }
  return out;
}

/** The lines where a hint's last key (`tests.g.0.exec.command` -> `command:`) or an `override:` is written. */
export function hintLines(text: string, hints: string[]): Set<number> {
  const keys = new Set(hints.map((h) => h.split(".").pop()!));
  const out = new Set<number>();
  text.split("\n").forEach((line, i) => {
    const key = /^\s*(?:-\s+)*([^\s:#][^:#]*?):/.exec(line)?.[1];
    if (key && (keys.has(key) || key === "override")) out.add(i + 1);
  });
  return out;
}

// ---- the -k pattern ------------------------------------------------------------------------------

/** The pattern language, as the repeat and trigger forms explain it. */
export function PatternHelp() {
  return (
    <div class="hint pattern-help">
      Like pytest's <code>-k</code>: each word is looked for, ignoring case, in a case's names: its test name (<code>exit_code[test_config0]</code>: the
      check, then which entry of that module), its class (<code>TestExec</code>) and its module (<code>exec</code>). Combine with <code>and</code>,{" "}
      <code>or</code>, <code>not</code> and parentheses: <code>test_config1</code>, <code>not exit_code</code>, <code>(stdout or exit_code) and not test_config0</code>.
      No quotes; empty means every case.
    </div>
  );
}

/** Repeat a run with a pattern (its syntax explained; the server's refusal shown in place). */
export function RepeatDialog(props: { run: TestRun; onClose: () => void }) {
  const [pattern, setPattern] = useState(props.run.pattern);
  const [error, setError] = useState<string>();
  const [busy, setBusy] = useState(false);
  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(undefined);
    try {
      const run = await api.post("/api/v1/test-runs/:id/repeat", { id: props.run.id }, pattern.trim() === "" ? null : pattern.trim());
      props.onClose();
      navigate(`/runs/${seg(run.id)}`);
    } catch (err) {
      setError(messageOf(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <Modal title={`Repeat ${props.run.config_name}`} onClose={props.onClose}>
      <form onSubmit={submit}>
        <p class="muted small">
          A new run with the config as it is now, the same suite{props.run.test_suite_name ? ` (${props.run.test_suite_name})` : ""}, overrides and target.
        </p>
        <Field label="Cases to run again (-k pattern)" hint={<PatternHelp />} wide>
          <input name="pattern" class="mono" value={pattern} onInput={(e) => setPattern((e.target as HTMLInputElement).value)} placeholder="empty: every case" autofocus />
        </Field>
        <ModalButtons error={error} onCancel={props.onClose} submit="Repeat" disabled={busy} />
      </form>
    </Modal>
  );
}

/** Rows of a report, failures first (then skipped, then passed), otherwise in report order. */
export function failuresFirst(rows: ReportRow[]): ReportRow[] {
  const rank = (s: string | undefined) => (s === "failed" ? 0 : s === "skipped" ? 1 : s === "passed" ? 2 : 1);
  return rows.map((row, i) => ({ row, i })).sort((a, b) => rank(a.row.status) - rank(b.row.status) || a.i - b.i).map((x) => x.row);
}

/** Counts of a report's rows by status. */
export function countRows(rows: ReportRow[]): StatusCounts {
  const counts = { total: rows.length, passed: 0, failed: 0, skipped: 0 };
  for (const row of rows) if (row.status === "passed" || row.status === "failed" || row.status === "skipped") counts[row.status]++;
  return counts;
}

export function Counts(props: { counts: StatusCounts }) {
  const { total, passed, failed, skipped } = props.counts;
  return (
    <div class="counts" aria-label="Report counts">
      <span class="count">
        <strong>{total.toLocaleString()}</strong> cases
      </span>
      <span class="count count-ok">
        <strong>{passed.toLocaleString()}</strong> passed
      </span>
      <span class={`count ${failed > 0 ? "count-bad" : ""}`}>
        <strong>{failed.toLocaleString()}</strong> failed
      </span>
      <span class="count">
        <strong>{skipped.toLocaleString()}</strong> skipped
      </span>
    </div>
  );
}
