import { useEffect, useState } from "preact/hooks";
import { api } from "../api.ts";
import { isOnline, useLive } from "../live.ts";
import { href, navigate, type Page, type PageProps } from "../router.ts";
import { prefixOf, type Me } from "../session.ts";
import type { Device } from "../../../update/devices/schema.ts";
import type { Group } from "../../../update/groups/schema.ts";
import { Badge, Card, Field, OnlineBadge, PageHeader, Pager, Show, Table, useAction, useDebounced, useLoad } from "../ui.tsx";
import { groupName, packageLabel } from "../update.ts";

const groupDescription = (g: Group): string => {
  const key = Object.keys(g.metadata).find((k) => k.endsWith(".group.description")) ?? "description";
  return typeof g.metadata[key] === "string" ? String(g.metadata[key]) : "";
};
const POLICY_HELP = (
  <ul class="hint" style={{ margin: "4px 0 0", paddingLeft: "18px" }}>
    <li>
      <strong>No update</strong> (<code>no_update,</code>): the group's devices are left as they are. New groups start so.
    </li>
    <li>
      <strong>Exact version</strong> (<code>exact_match,VERSION</code>): every device in the group is brought to exactly VERSION, through the group's packages for its
      device type: an upgrade, a downgrade or several steps.
    </li>
    <li>A device in several groups follows the group with the lowest priority number (1 before 25); groups sharing a device need different priorities.</li>
  </ul>
);

function Groups({ me }: PageProps) {
  const groups = useLoad(() => api.get("/api/v2/groups"));
  const [busy, run] = useAction();
  const [name, setName] = useState("");
  const [description, setDescription] = useState("");
  const [priority, setPriority] = useState("25");
  const prefix = prefixOf(me);
  const create = async (e: Event) => {
    e.preventDefault();
    let created: Group | undefined;
    const ok = await run(
      async () => {
        created = await api.post("/api/v2/groups", {}, { metadata: { [`${prefix}.group.name`]: name.trim(), ...(description.trim() ? { [`${prefix}.group.description`]: description.trim() } : {}) }, priority: Number(priority) });
      },
      { done: `Group ${name.trim()} created` },
    );
    if (ok && created) navigate(`/groups/${created.id}`);
  };
  return (
    <>
      <PageHeader title="Groups" sub="A group gives its devices an update policy and the packages to reach it." />
      <Show loaded={groups}>
        {(list) => (
          <Table
            rows={[...list].sort((a, b) => a.priority - b.priority || a.id - b.id)}
            rowKey={(g) => g.id}
            empty="No groups yet."
            columns={[
              {
                head: "Group",
                sort: groupName,
                cell: (g) => (
                  <>
                    <a class="strong" href={href(`/groups/${g.id}`)}>
                      {groupName(g)}
                    </a>
                    {groupDescription(g) && <div class="muted small">{groupDescription(g)}</div>}
                  </>
                ),
              },
              { head: "Policy", sort: (g) => g.policy, cell: (g) => <PolicyBadge policy={g.policy} /> },
              { head: "Priority", sort: (g) => g.priority, cell: (g) => g.priority },
              { head: "Devices", sort: (g) => g.devices.length, cell: (g) => g.devices.length },
              { head: "Packages", sort: (g) => g.packages.length, cell: (g) => g.packages.length },
            ]}
          />
        )}
      </Show>
      <Card title="New group" class="narrow-card">
        <form onSubmit={create}>
          <div class="form-row">
            <Field label="Name" wide>
              <input name="group-name" required value={name} onInput={(e) => setName(e.currentTarget.value)} />
            </Field>
            <Field label="Priority">
              <input type="number" step={1} style={{ width: "90px" }} value={priority} onInput={(e) => setPriority(e.currentTarget.value)} />
            </Field>
          </div>
          <Field label="Description (optional)">
            <input value={description} onInput={(e) => setDescription(e.currentTarget.value)} />
          </Field>
          <button type="submit" class="primary" disabled={busy || !name.trim() || !Number.isInteger(Number(priority))}>
            Create group
          </button>
          <p class="hint" style={{ marginTop: "8px" }}>
            A new group has no devices, no packages and the policy “no update”.
          </p>
        </form>
      </Card>
    </>
  );
}

function PolicyBadge(props: { policy: string }) {
  const [name, arg = ""] = props.policy.split(/,(.*)/s);
  if (name === "no_update") return <Badge>no update</Badge>;
  if (name === "exact_match") return <Badge tone="info">exactly {arg || "(empty)"}</Badge>;
  return <Badge tone="warn">{props.policy}</Badge>;
}

function GroupPage({ params, me }: PageProps) {
  const id = params.id!;
  const group = useLoad(() => api.get("/api/v2/groups/:id", { id }), [id]);
  const [busy, run] = useAction();
  const remove = async (g: Group) => {
    if (
      await run(() => api.delete("/api/v2/groups/:id", { id: g.id }), {
        confirm: [`Delete the group ${groupName(g)}?`, { body: "The server refuses while devices or packages are still assigned: remove them first.", confirm: "Delete group" }],
        done: "Group deleted",
      })
    )
      navigate("/groups");
  };
  return (
    <Show loaded={group}>
      {(g) => (
        <>
          <PageHeader
            title={groupName(g)}
            sub={
              <>
                <a href={href("/groups")}>Groups</a> / id {g.id}
                {groupDescription(g) && ` · ${groupDescription(g)}`}
              </>
            }
          >
            <button type="button" class="danger" onClick={() => remove(g)} disabled={busy}>
              Delete group
            </button>
          </PageHeader>
          <div class="grid2">
            <div>
              <PolicyCard group={g} onChange={group.reload} />
              <PackagesCard group={g} me={me} onChange={group.reload} />
            </div>
            <MembersCard group={g} me={me} onChange={group.reload} />
          </div>
        </>
      )}
    </Show>
  );
}

function PolicyCard(props: { group: Group; onChange: () => void }) {
  const g = props.group;
  const [name, arg = ""] = g.policy.split(/,(.*)/s);
  const [kind, setKind] = useState(name === "exact_match" ? "exact_match" : "no_update");
  const [version, setVersion] = useState(arg);
  const [priority, setPriority] = useState(String(g.priority));
  const [busy, run] = useAction();
  const savePolicy = async (e: Event) => {
    e.preventDefault();
    const policy = kind === "exact_match" ? `exact_match,${version.trim()}` : "no_update,";
    if (await run(() => api.post("/api/v2/groups/:id/policy", { id: g.id }, { policy }), { done: "Policy saved" })) props.onChange();
  };
  const savePriority = async (e: Event) => {
    e.preventDefault();
    if (await run(() => api.post("/api/v2/groups/:id/priority", { id: g.id }, { priority: Number(priority) }), { done: "Priority saved" })) props.onChange();
  };
  return (
    <Card title="Update policy">
      <p>
        Now: <PolicyBadge policy={g.policy} />
      </p>
      <form class="form-row" onSubmit={savePolicy}>
        <Field label="Policy">
          <select aria-label="Policy" value={kind} onChange={(e) => setKind(e.currentTarget.value)}>
            <option value="no_update">No update</option>
            <option value="exact_match">Exact version</option>
          </select>
        </Field>
        {kind === "exact_match" && (
          <Field label="Version">
            <input aria-label="Target version" required value={version} onInput={(e) => setVersion(e.currentTarget.value)} placeholder="v2" />
          </Field>
        )}
        <button type="submit" class="primary" disabled={busy}>
          Save policy
        </button>
      </form>
      {POLICY_HELP}
      <form class="form-row" onSubmit={savePriority} style={{ marginTop: "14px" }}>
        <Field label="Priority">
          <input type="number" step={1} style={{ width: "90px" }} aria-label="Priority" value={priority} onInput={(e) => setPriority(e.currentTarget.value)} />
        </Field>
        <button type="submit" disabled={busy || String(g.priority) === priority || !Number.isInteger(Number(priority))}>
          Save priority
        </button>
      </form>
    </Card>
  );
}

function PackagesCard(props: { group: Group; me: Me; onChange: () => void }) {
  const g = props.group;
  const packages = useLoad(() => api.get("/api/v1/packages"));
  const [choice, setChoice] = useState("");
  const [busy, run] = useAction();
  const prefix = prefixOf(props.me);
  const set = (ids: number[], done: string) => run(() => api.post("/api/v2/groups/:id/package", { id: g.id }, { packages: ids }), { done }).then((ok) => ok && props.onChange());
  const all = packages.data ?? [];
  const label = (id: number) => {
    const p = all.find((x) => x.id === id);
    return p ? packageLabel(p, prefix) : `package #${id}`;
  };
  return (
    <Card title="Packages">
      {g.packages.length === 0 ? (
        <p class="muted">No packages: the group's devices have nothing to install.</p>
      ) : (
        <ul class="plain-list">
          {g.packages.map((id) => (
            <li key={id}>
              <span>{label(id)}</span>
              <button type="button" class="small danger" disabled={busy} aria-label={`Remove ${label(id)} from the group`} onClick={() => set(g.packages.filter((x) => x !== id), "Package removed from the group")}>
                Remove
              </button>
            </li>
          ))}
        </ul>
      )}
      <form
        class="form-row"
        onSubmit={(e) => {
          e.preventDefault();
          if (choice) set([...g.packages, Number(choice)], "Package added").then(() => setChoice(""));
        }}
      >
        <select aria-label="Package to add" value={choice} onChange={(e) => setChoice(e.currentTarget.value)}>
          <option value="">Choose a package…</option>
          {all
            .filter((p) => !g.packages.includes(p.id))
            .map((p) => (
              <option key={p.id} value={String(p.id)}>
                {packageLabel(p, prefix)}
              </option>
            ))}
        </select>
        <button type="submit" disabled={busy || !choice}>
          Add package
        </button>
      </form>
    </Card>
  );
}

const MEMBERS_PAGE = 20;

function MembersCard(props: { group: Group; me: Me; onChange: () => void }) {
  const g = props.group;
  const [offset, setOffset] = useState(0);
  const ids = g.devices.slice(offset, offset + MEMBERS_PAGE);
  const live = useLive();
  const members = useLoad(() => Promise.all(ids.map((id) => api.get("/api/v2/devices/:id{[0-9]+}", { id }).catch(() => ({ id, name: `device ${id}`, mac_address: "", connected: false }) as Device))), [ids.join(","), live.opened]);
  const [busy, run] = useAction();
  const change = (add: number[], remove: number[], done: string) =>
    run(() => api.patch("/api/v2/groups/:id/devices", { id: g.id }, { add, remove }), { done }).then((ok) => {
      if (ok) props.onChange();
      return ok;
    });
  useEffect(() => {
    if (offset >= g.devices.length && offset > 0) setOffset(Math.max(0, offset - MEMBERS_PAGE));
  }, [g.devices.length]);
  return (
    <Card title={`Devices (${g.devices.length})`}>
      <AddDevices
        group={g}
        onAdd={(id, name) => change([id], [], `${name} added`)}
        onAddMatching={(q, count) =>
          run(() => api.post("/api/v2/groups/:id/devices/matching", { id: g.id }, { q }), {
            confirm: [`Add the ${count.toLocaleString()} devices matching “${q}”?`, { body: "Devices already in the group stay as they are.", confirm: "Add all", danger: false }],
            done: `Devices matching “${q}” added`,
          }).then((ok) => {
            if (ok) props.onChange();
            return ok;
          })
        }
        busy={busy}
      />
      {g.devices.length === 0 ? (
        <p class="muted">No devices in this group.</p>
      ) : (
        <Show loaded={members}>
          {(list) => (
            <>
              <ul class="plain-list">
                {list.map((d) => (
                  <li key={d.id}>
                    <span>
                      <a href={href(`/devices/${d.id}`)}>{d.name || d.mac_address}</a> <OnlineBadge online={isOnline(live, d.mac_address, d.connected)} />
                    </span>
                    <button type="button" class="small danger" disabled={busy} aria-label={`Remove ${d.name} from the group`} onClick={() => change([], [d.id], `${d.name} removed from the group`)}>
                      Remove
                    </button>
                  </li>
                ))}
              </ul>
              {g.devices.length > MEMBERS_PAGE && <Pager offset={offset} limit={MEMBERS_PAGE} total={g.devices.length} onChange={setOffset} />}
            </>
          )}
        </Show>
      )}
    </Card>
  );
}

/** Finds devices by the list's filter (server side) and adds one. */
function AddDevices(props: { group: Group; onAdd: (id: number, name: string) => Promise<boolean>; onAddMatching: (q: string, count: number) => Promise<boolean>; busy: boolean }) {
  const [text, setText] = useState("");
  const q = useDebounced(text.trim(), 250);
  const found = useLoad(() => (q ? api.page("/api/v2/devices", { limit: "8", q: encodeURIComponent(q) }) : Promise.resolve(undefined)), [q]);
  return (
    <div class="drop" style={{ marginBottom: "12px" }}>
      <input type="search" style={{ width: "100%" }} aria-label="Find a device to add" placeholder="Add a device: type a name, MAC or id" value={text} onInput={(e) => setText(e.currentTarget.value)} />
      {q && found.data && (
        <ul class="plain-list" style={{ marginTop: "6px" }}>
          {found.data.items.length === 0 && <li class="muted">No device matches.</li>}
          {found.data.items.map((d) => (
            <li key={d.id}>
              <span>
                {d.name || d.mac_address} <span class="mono small muted">{d.mac_address}</span>
              </span>
              {props.group.devices.includes(d.id) ? (
                <span class="muted small">in the group</span>
              ) : (
                <button type="button" class="small" disabled={props.busy} aria-label={`Add ${d.name || d.mac_address}`} onClick={() => props.onAdd(d.id, d.name || d.mac_address)}>
                  Add
                </button>
              )}
            </li>
          ))}
          {found.data.total > found.data.items.length && <li class="muted small">{found.data.total - found.data.items.length} more: refine the filter, or add them all.</li>}
          {found.data.total > 1 && (
            <li>
              <button type="button" class="small" disabled={props.busy} onClick={() => props.onAddMatching(q, found.data!.total)}>
                Add all {found.data.total.toLocaleString()} matching
              </button>
            </li>
          )}
        </ul>
      )}
    </div>
  );
}

export const groupsPage: Page = { path: "/groups", title: "Groups", component: Groups, nav: { section: "Update server", label: "Groups", order: 30 } };
export const groupPage: Page = { path: "/groups/:id", title: "Group", component: GroupPage };
