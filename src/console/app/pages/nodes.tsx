import { api } from "../api.ts";
import type { Page, PageProps } from "../router.ts";
import { canReadTests } from "../testruns.tsx";
import { Badge, Empty, PageHeader, Show, Table, useLoad } from "../ui.tsx";

/** This gateway and the lab nodes (test_server.nodes, nodes_file), each checked when the page loads. */
function Nodes(_: PageProps) {
  const nodes = useLoad(() => api.get("/api/v1/test-nodes/status"));
  return (
    <>
      <PageHeader title="Lab nodes" sub="Where test runs can go: this gateway and the nodes of test_server.nodes and nodes_file.">
        <button type="button" onClick={nodes.reload} disabled={nodes.loading}>
          {nodes.loading ? "Checking…" : "Check again"}
        </button>
      </PageHeader>
      <Show loaded={nodes}>
        {(list) => (
          <>
            <Table
              rows={list}
              rowKey={(n) => n.name}
              rowAttrs={(n) => ({ "data-node": n.name })}
              columns={[
                { head: "Node", class: "strong", headClass: "", cell: (n) => (n.local ? "This gateway" : n.name) },
                {
                  head: "State",
                  cell: (n) => (
                    <>
                      {n.reachable ? <Badge tone="ok">reachable</Badge> : <Badge tone="bad">unreachable</Badge>}
                      {n.error && <div class="small form-error">{n.error}</div>}
                    </>
                  ),
                },
                { head: "Version", class: "mono", cell: (n) => n.version || <span class="muted" title="not a labgate node, or down">–</span> },
                { head: "Address", class: "hide-narrow mono small", headClass: "hide-narrow", cell: (n) => (n.local ? <span class="muted">Local device</span> : n.url) },
                {
                  head: "Answer",
                  class: "hide-narrow",
                  sort: (n) => n.latency_ms,
                  cell: (n) => (n.local ? <span class="muted">–</span> : n.latency_ms === null ? <span class="muted">none</span> : `${n.latency_ms} ms`),
                },
              ]}
            />
            {list.length === 1 && (
              <Empty>
                No lab nodes configured. Add them to the gateway's configuration (<code>test_server.nodes: {"{node1: http://10.0.1.2:5000}"}</code> or a{" "}
                <code>nodes_file</code>) and restart it.
              </Empty>
            )}
          </>
        )}
      </Show>
    </>
  );
}

export const nodesPage: Page = { path: "/nodes", title: "Lab nodes", component: Nodes, nav: { section: "Test runs", label: "Nodes", order: 40 }, visible: canReadTests };
