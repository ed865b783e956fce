/**
 * Pieces the deployment pages and the device page share: following deployment events, and a
 * device's update history (README "Deployments").
 */
import { useRef } from "preact/hooks";
import { get } from "./api.ts";
import { href } from "./router.ts";
import { Badge, Card, Show, Table, Time, useEventSource, useLoad } from "./ui.tsx";

/** A deployment event of /api/stream: `device` (a MAC) on the per-device ones. */
export interface DeploymentEvent {
  deployment: number;
  device?: string;
}

/** Calls `reload` (at most every 150 ms) when a deployment event of /api/stream passes `match`. */
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
  useEventSource<{ deployment: DeploymentEvent; deployment_device: DeploymentEvent }>("/api/stream", {
    deployment: (d) => match(d) && later(),
    deployment_device: (d) => match(d) && later(),
  });
}

interface HistoryEntry {
  id: number;
  deployment: number | null;
  from_version: string | null;
  to_version: string;
  outcome: string;
  reason: string | null;
  at: string;
}

const OUTCOME_TONE: Record<string, "ok" | "bad" | "warn" | "muted"> = { installed: "ok", failed: "bad", not_reached: "warn", aborted: "muted" };

/** A device's update history; it follows the device's deployment events. */
export function UpdateHistory(props: { deviceId: number; mac: string }) {
  const history = useLoad(() => get<HistoryEntry[]>(`/api/v2/devices/${props.deviceId}/update-history?limit=50`), [props.deviceId]);
  useDeploymentEvents((d) => d.device === props.mac, history.reload);
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
                  </>
                ),
              },
              { head: "Deployment", cell: (h) => (h.deployment === null ? <span class="muted">–</span> : <a href={href(`/deployments/${h.deployment}`)}>#{h.deployment}</a>) },
            ]}
          />
        )}
      </Show>
    </Card>
  );
}
