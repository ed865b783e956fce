/**
 * Pieces the deployment pages and the device page share: following deployment events, and a
 * device's update history (README "Deployments").
 */
import { useRef, useState } from "preact/hooks";
import { api, call } from "./api.ts";
import { href } from "./router.ts";
import type { StreamEventData } from "../../protocol/streams.ts";
import { Badge, Card, Show, Table, Time, useEventSource, useLoad } from "./ui.tsx";

/** A deployment event of /api/stream: `device` (a MAC) on the per-device ones. */
export type DeploymentEvent = StreamEventData["deployment"] | StreamEventData["deployment_device"];

/** Calls `reload` (at most every 150 ms) when a deployment event of /api/stream passes `match`, and when the stream (re)opens. */
export function useDeploymentEvents(match: (data: DeploymentEvent) => boolean, reload: () => void): void {
  const pending = useRef(false);
  const later = () => {
    if (pending.current) return;
    pending.current = true;
    setTimeout(() => {
      pending.current = false;
      reload();
    }, 150);
  };
  useEventSource<Pick<StreamEventData, "deployment" | "deployment_device">>(
    "/api/stream",
    {
      deployment: (d) => match(d) && later(),
      deployment_device: (d) => match(d) && later(),
    },
    reload,
  );
}

const OUTCOME_TONE: Record<string, "ok" | "bad" | "warn" | "muted"> = { installed: "ok", failed: "bad", not_reached: "warn", aborted: "muted", power_cycle: "warn" };

/** What a board's console printed during one attempt (docs/lab.md), loaded when opened. */
export function AttemptConsole(props: { deviceId: number; entry: number; bytes: number }) {
  const [text, setText] = useState<string | undefined>(undefined);
  const load = async (open: boolean) => {
    if (!open || text !== undefined) return;
    const res = await call("GET", `/api/v2/devices/${props.deviceId}/update-history/${props.entry}/console`).catch((e: Error) => e);
    setText(res instanceof Error ? res.message : await res.text());
  };
  return (
    <details class="output" data-console-span={props.entry} onToggle={(e) => void load((e.currentTarget as HTMLDetailsElement).open)}>
      <summary class="small">console ({props.bytes} bytes)</summary>
      <pre class="console">{text ?? "…"}</pre>
    </details>
  );
}

/** A device's update history; it follows the device's deployment events. */
export function UpdateHistory(props: { deviceId: number; mac: string }) {
  const history = useLoad(() => api.get("/api/v2/devices/:id{[0-9]+}/update-history", { id: props.deviceId, limit: "50" }), [props.deviceId]);
  // Boards keep each attempt's console span; other devices have none.
  const spans = useLoad(() => api.get("/api/v2/devices/:id{[0-9]+}/console-spans", { id: props.deviceId }).catch(() => []), [props.deviceId]);
  const spanOf = (id: number) => (spans.data ?? []).find((s) => s.history_id === id);
  useDeploymentEvents((d) => "device" in d && d.device === props.mac, () => (history.reload(), spans.reload()));
  return (
    <Card title="Update history">
      <Show loaded={history}>
        {(list) => (
          <Table
            rows={list}
            rowKey={(h) => h.id}
            rowAttrs={(h) => ({ "data-history": h.id })}
            empty="No updates reported yet."
            columns={[
              { head: "When", class: "nowrap", cell: (h) => <Time value={h.at} /> },
              {
                head: "Update",
                cell: (h) => (
                  <span class="mono">
                    {h.from_version ?? "?"} → {h.to_version}
                  </span>
                ),
              },
              {
                head: "Outcome",
                cell: (h) => (
                  <>
                    <Badge tone={OUTCOME_TONE[h.outcome] ?? "muted"}>{h.outcome.replace("_", " ")}</Badge>
                    {h.reason && <div class="muted small">{h.reason}</div>}
                    {h.output && (
                      <details class="output">
                        <summary class="small">output</summary>
                        <pre>{h.output}</pre>
                      </details>
                    )}
                    {spanOf(h.id) && <AttemptConsole deviceId={props.deviceId} entry={h.id} bytes={spanOf(h.id)!.bytes} />}
                  </>
                ),
              },
              {
                head: "Deployment",
                cell: (h) =>
                  h.deployment === null ? (
                    <span class="muted">–</span>
                  ) : (
                    <>
                      <a href={href(`/deployments/${h.deployment}`)}>#{h.deployment}</a>
                      {h.attempt !== null && <span class="muted small"> attempt {h.attempt}</span>}
                    </>
                  ),
              },
            ]}
          />
        )}
      </Show>
    </Card>
  );
}
