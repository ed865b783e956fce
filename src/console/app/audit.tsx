/*
 * The audit log in the console: the entries' shape and columns, the API path with filters, and a
 * device page's recent entries (the Audit page itself is pages/audit.tsx).
 */
import type { AuditEntry } from "../../audit/schema.ts";
import { api } from "./api.ts";
import { href } from "./router.ts";
import { Badge, Card, Show, Table, Time, useChanges, useLoad } from "./ui.tsx";

/** The filters the Audit page keeps in its address (so a filtered view can be linked to). */
export const FILTERS = ["actor", "action", "target", "since", "until"] as const;
export type Filters = Record<(typeof FILTERS)[number], string>;

/** `/api/v1/audit` with these filters (empty ones left out); `extra`: paging or the CSV format. */
export function auditQuery(filters: Partial<Filters>, extra: Record<string, string>): Record<string, string> {
  const params: Record<string, string> = {};
  for (const [key, value] of Object.entries(filters)) {
    if (!value) continue;
    // The date inputs give a day: the whole day, in UTC.
    params[key] = key === "since" ? `${value}T00:00:00Z` : key === "until" ? new Date(Date.parse(`${value}T00:00:00Z`) + 86_400_000).toISOString() : value;
  }
  return { ...params, ...extra };
}

/** Who acted, as one line: the kind's word and the name; nobody known, and the name a failed login tried. */
function actorText(e: AuditEntry): string {
  if (e.actor_kind !== "anonymous") return `${e.actor_kind === "account" ? "" : `${e.actor_kind} `}${e.actor}`;
  return typeof e.detail?.tried === "string" ? `anonymous (tried '${e.detail.tried}')` : "anonymous";
}

/** How many requests an entry stands for: refusals are counted per client and route in a window. */
const timesOf = (e: AuditEntry): number => (typeof e.detail?.count === "number" ? e.detail.count : 1);

/** The window a counted entry's requests came in, for its title. */
const windowOf = (e: AuditEntry): string | undefined =>
  typeof e.detail?.first === "string" && typeof e.detail?.last === "string" ? `from ${new Date(e.detail.first).toLocaleString()} to ${new Date(e.detail.last).toLocaleString()}` : undefined;

/** The entries' columns, shared with the device page's recent entries. */
export const auditColumns = [
  { head: "Time", cell: (e: AuditEntry) => <Time value={e.time} /> },
  {
    head: "Actor",
    cell: (e: AuditEntry) => (
      <>
        <span class="strong">{actorText(e)}</span>
        {e.client && <div class="muted mono small">{e.client}</div>}
      </>
    ),
  },
  {
    head: "Action",
    cell: (e: AuditEntry) => (
      <>
        <span class="mono">{e.action}</span> {e.outcome === "refused" && <Badge tone="bad">refused</Badge>}{" "}
        {timesOf(e) > 1 && (
          <span class="strong" title={`${timesOf(e).toLocaleString()} requests ${windowOf(e) ?? ""}`.trim()} data-count={timesOf(e)}>
            ×{timesOf(e).toLocaleString()}
          </span>
        )}
      </>
    ),
  },
  {
    head: "Target",
    cell: (e: AuditEntry) =>
      e.target_name ? (
        <>
          <span class="strong">{e.target_name}</span>
          <div class="mono small muted">{e.target}</div>
        </>
      ) : (
        <span class="mono">{e.target}</span>
      ),
  },
  { head: "Detail", class: "hide-narrow mono small", cell: (e: AuditEntry) => (e.detail ? <span style={{ wordBreak: "break-all" }}>{JSON.stringify(e.detail)}</span> : "") },
];


/** A device's newest audit entries (admins), with a link to all of them on the Audit page. */
export function RecentAudit(props: { deviceId: number }) {
  const target = `device:${props.deviceId}`;
  // An action on the page (a tag, a rename, a device action) is recorded: show it.
  const changes = useChanges();
  const entries = useLoad(() => api.get("/api/v1/audit", auditQuery({ target }, { limit: "10" })), [props.deviceId, changes]);
  return (
    <Card title="Audit log" actions={<a href={href("/audit", { target })}>All entries</a>}>
      <Show loaded={entries}>
        {(rows) => <Table rows={rows} rowKey={(e) => e.id} empty="Nothing recorded for this device yet." label="Recent audit entries" columns={auditColumns.slice(0, 4)} />}
      </Show>
    </Card>
  );
}
