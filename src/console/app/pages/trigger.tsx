import { useEffect, useState } from "preact/hooks";
import { api, call, seg } from "../api.ts";
import { href, type Page, type PageProps } from "../router.ts";
import { canReadTests, canRunTests, countRows, Counts, isFinal, runBase, runOf, RUN_STREAM, StatusBadge, type RunEvents } from "../testruns.tsx";
import type { ReportRow, TestRun } from "../../../testrun/schema.ts";
import { Card, ErrorBox, PageHeader, Show, Time, useAction, useEventSource, useEvery, useLoad } from "../ui.tsx";

/** One run of a multi-node trigger: here, or on a node (read through this gateway). */
interface Share {
  node: string;
  runId: string;
  group: string;
  local: boolean;
}

const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? "" : "s"}`;

/** A multi-node trigger: its runs side by side, one column per node, live. */
function TriggerPage({ params, me }: PageProps) {
  const id = params.id!;
  const trigger = useLoad(() => api.get("/api/v1/test-runs/trigger/:tid", { tid: id }), [id]);
  const [busy, act] = useAction();
  useEventSource<RunEvents>(
    RUN_STREAM,
    {
      trigger: (changed) => changed.trigger_id === id && trigger.setData(changed),
      run: (run) => run.trigger_id === id && trigger.reload(),
    },
    trigger.reload,
  );
  const abort = () =>
    act(() => api.delete("/api/v1/test-runs/trigger/:tid", { tid: id }), {
      confirm: ["Abort this trigger on every node?", { body: "Its runs here are aborted and every node is told to abort its share.", confirm: "Abort all" }],
      done: "Abort requested",
    });
  return (
    <Show loaded={trigger}>
      {(t) => {
        const shares: Share[] = [
          ...t.runs.map((r) => ({ node: "this gateway", runId: r.id, group: r.test_suite_name, local: true })),
          ...t.remote_runs.map((r) => ({ node: r.machine, runId: r.run_id, group: r.group, local: false })),
        ];
        return (
          <>
            <PageHeader
              title={
                <>
                  <span class="mono">{t.config_name}</span> on {plural(new Set(shares.map((s) => s.node)).size, "node")} <StatusBadge status={t.status} />
                </>
              }
              sub={
                <>
                  <a href={href("/runs")}>‹ All runs</a> · trigger <span class="mono small">{t.trigger_id}</span>
                  {t.test_suite_name ? ` · suite ${t.test_suite_name}` : ""}
                </>
              }
            >
              {canRunTests(me) && t.status === "running" && (
                <button type="button" class="danger" disabled={busy} onClick={abort}>
                  Abort all
                </button>
              )}
            </PageHeader>
            {t.error && <ErrorBox error={t.error} />}
            {shares.length === 0 ? (
              <p class="muted">No run started yet…</p>
            ) : (
              <div class="side-by-side">
                {shares.map((s) => (
                  <ShareColumn key={`${s.node}:${s.runId}`} share={s} local={t.runs.find((r) => r.id === s.runId)} />
                ))}
              </div>
            )}
          </>
        );
      }}
    </Show>
  );
}

function ShareColumn(props: { share: Share; local: TestRun | undefined }) {
  const { share } = props;
  const base = runBase(share.runId, share.local ? undefined : share.node);
  const remote = useLoad(() => (share.local ? Promise.resolve(undefined) : runOf(share.runId, share.node)), [base]);
  const run = props.local ?? remote.data;
  const final = run ? isFinal(run) : false;
  // A node's run has no stream at this gateway: asked again every 2 s until it ends.
  useEvery(2000, remote.reload, !share.local && !final);
  const [rows, setRows] = useState<ReportRow[] | undefined>();
  useEffect(() => {
    if (!final) return;
    call("GET", `${base}/report?format=json`).then(
      async (res) => setRows((res.headers.get("content-type") ?? "").includes("json") ? ((await res.json()) as ReportRow[]) : undefined),
      () => setRows(undefined),
    );
  }, [final, base]);
  const link = href(`/runs/${seg(share.runId)}`, share.local ? undefined : { node: share.node });
  return (
    <Card title={share.node} class="share" actions={run && <StatusBadge status={run.status} aborting={run.abort_requested} />}>
      {remote.error && <ErrorBox error={remote.error} retry={remote.reload} />}
      {run ? (
        <>
          <dl class="props">
            <dt>Group</dt>
            <dd>{share.group || "all"}</dd>
            <dt>Started</dt>
            <dd>{run.started_at ? <Time value={run.started_at} /> : <span class="muted">not yet</span>}</dd>
            <dt>Finished</dt>
            <dd>{run.finished_at ? <Time value={run.finished_at} /> : <span class="muted">not yet</span>}</dd>
          </dl>
          {rows && <Counts counts={countRows(rows)} />}
          {rows && rows.some((r) => r.status === "failed") && (
            <ul class="failures">
              {rows
                .filter((r) => r.status === "failed")
                .slice(0, 5)
                .map((r, i) => (
                  <li key={i} class="small">
                    <span class="mono">{r["test name"]}</span> <span class="muted">{(r.message ?? "").split("\n")[0]}</span>
                  </li>
                ))}
            </ul>
          )}
          {run.error && <p class="form-error small">{run.error}</p>}
          <a href={link}>Open the run ›</a>
        </>
      ) : (
        !remote.error && <p class="muted">Loading…</p>
      )}
    </Card>
  );
}

export const triggerPage: Page = { path: "/triggers/:id", title: "Multi-node run", component: TriggerPage, visible: canReadTests };
