/*
 * Which versions run where (README "Deployments"): the devices the caller may read by reported
 * software version, per device type and per group, each a bar of its versions (one colour per
 * version across the page).
 */
import { useMemo } from "preact/hooks";
import { api } from "../api.ts";
import { href, type Page } from "../router.ts";
import type { VersionCount } from "../../../update/devices/schema.ts";
import { Card, PageHeader, Show, Table, useLoad } from "../ui.tsx";

const PALETTE = ["#2458d6", "#16794a", "#f38744", "#6938ef", "#b42318", "#0e9384", "#e0a03a", "#c11574", "#667085", "#9db7f5"];
const NONE = "#d0d5dd";
const label = (v: string | null) => v ?? "none reported";

interface Row {
  devices: number;
  versions: VersionCount[];
  others: number;
}

/** A row's versions: a bar (hover: the numbers) and the list, most devices first. */
function Versions(props: { row: Row; color: (v: string | null) => string }) {
  const { row } = props;
  const summary = [...row.versions.map((v) => `${v.devices} on ${label(v.version)}`), ...(row.others ? [`${row.others} on other versions`] : [])].join(", ");
  return (
    <>
      <span class="state-bar wide" role="img" aria-label={summary} title={summary}>
        {row.versions.map((v) => (
          <span key={label(v.version)} class="state-seg" data-version={label(v.version)} style={{ width: `${(v.devices * 100) / Math.max(1, row.devices)}%`, background: props.color(v.version) }} />
        ))}
      </span>
      <div class="version-list small">
        {row.versions.map((v) => (
          <span key={label(v.version)} class={v.version === null ? "muted" : "mono"}>
            <span class="swatch" style={{ background: props.color(v.version) }} /> {label(v.version)} <strong>{v.devices}</strong>
          </span>
        ))}
        {row.others > 0 && <span class="muted">and {row.others} on other versions</span>}
      </div>
    </>
  );
}

function FleetVersionsView() {
  const summary = useLoad(() => api.get("/api/v2/devices/versions"));
  // One colour a version for the whole page: the most common versions get the first colours.
  const color = useMemo(() => {
    const totals = new Map<string, number>();
    for (const row of summary.data?.by_device_type ?? []) for (const v of row.versions) if (v.version !== null) totals.set(v.version, (totals.get(v.version) ?? 0) + v.devices);
    const order = [...totals.keys()].sort((a, b) => totals.get(b)! - totals.get(a)! || a.localeCompare(b, undefined, { numeric: true }));
    return (v: string | null) => (v === null ? NONE : PALETTE[(order.indexOf(v) + PALETTE.length) % PALETTE.length]);
  }, [summary.data]);
  return (
    <>
      <PageHeader title="Versions" sub="Which software versions the devices report, per device type and per group." />
      <Show loaded={summary}>
        {(s) => (
          <>
            <Card title="By device type">
              <Table
                rows={s.by_device_type}
                rowKey={(r) => r.device_type ?? ""}
                rowAttrs={(r) => ({ "data-device-type": r.device_type ?? "" })}
                empty="No devices yet."
                class="versions"
                columns={[
                  { head: "Device type", class: "mono", headClass: "", sort: (r) => r.device_type, cell: (r) => r.device_type ?? <span class="muted">none reported</span> },
                  { head: "Devices", class: "num", sort: (r) => r.devices, cell: (r) => r.devices },
                  { head: "Versions", class: "versions-cell", cell: (r) => <Versions row={r} color={color} /> },
                ]}
              />
            </Card>
            <Card title="By group">
              <Table
                rows={s.by_group}
                rowKey={(r) => r.group}
                rowAttrs={(r) => ({ "data-group": r.group })}
                empty="No devices in groups."
                class="versions"
                columns={[
                  { head: "Group", sort: (r) => r.name ?? `Group ${r.group}`, cell: (r) => <a href={href(`/groups/${r.group}`)}>{r.name ?? `Group ${r.group}`}</a> },
                  { head: "Devices", class: "num", sort: (r) => r.devices, cell: (r) => r.devices },
                  { head: "Versions", class: "versions-cell", cell: (r) => <Versions row={r} color={color} /> },
                ]}
              />
            </Card>
          </>
        )}
      </Show>
    </>
  );
}

export const versionsPage: Page = { path: "/versions", title: "Versions", component: FleetVersionsView, nav: { section: "Update server", label: "Versions", order: 45 } };
