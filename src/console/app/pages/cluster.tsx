import { api } from "../api.ts";
import type { Page, PageProps } from "../router.ts";
import { isAdmin } from "../session.ts";
import { Badge, Empty, PageHeader, Show, Table, useLoad } from "../ui.tsx";

const STATE_TONE = { up: "ok", down: "bad", stopped: "muted" } as const;

/** The nodes on this gateway's PostgreSQL: their state, the devices connected to each, the jobs each runs. */
function Cluster(_: PageProps) {
  const view = useLoad(() => api.get("/api/v1/cluster"));
  return (
    <>
      <PageHeader title="Cluster" sub="Every labgate serving from this database: devices may connect to any of them; each job runs on one at a time.">
        <button type="button" onClick={view.reload} disabled={view.loading}>
          {view.loading ? "Reading…" : "Read again"}
        </button>
      </PageHeader>
      <Show loaded={view}>
        {({ nodes }) => (
          <>
            <Table
              label="Cluster nodes"
              rows={nodes}
              rowKey={(n) => n.name}
              rowAttrs={(n) => ({ "data-node": n.name, "data-state": n.state })}
              columns={[
                { head: "Node", class: "strong", headClass: "", cell: (n) => n.name },
                { head: "State", cell: (n) => <Badge tone={STATE_TONE[n.state]}>{n.state}</Badge> },
                { head: "Devices", sort: (n) => n.connected_devices, cell: (n) => n.connected_devices.toLocaleString() },
                { head: "Jobs", class: "small", cell: (n) => (n.jobs.length > 0 ? n.jobs.join(", ") : <span class="muted">none</span>) },
                { head: "Address", class: "hide-narrow mono small", headClass: "hide-narrow", cell: (n) => n.advertise_url || <span class="muted">not set</span> },
              ]}
            />
            {nodes.length === 1 && (
              <Empty>
                One node. Others join by serving from the same PostgreSQL <code>database.url</code>, each with its own <code>cluster.node_name</code> and{" "}
                <code>cluster.advertise_url</code> (docs/cluster.md).
              </Empty>
            )}
          </>
        )}
      </Show>
    </>
  );
}

export const clusterPage: Page = { path: "/cluster", title: "Cluster", component: Cluster, nav: { section: "Administration", label: "Cluster", order: 30 }, visible: isAdmin };
