import { useEffect, useState } from "preact/hooks";
import { api, seg } from "../api.ts";
import { isOnline, useLive } from "../live.ts";
import { href, replaceQuery, type Page, type PageProps } from "../router.ts";
import { canAdminWrite, prefixOf } from "../session.ts";
import type { Device, DeviceSort } from "../../../update/devices/schema.ts";
import type { Group } from "../../../update/groups/schema.ts";
import { groupName } from "../update.ts";
import { Badge, Field, Modal, ModalButtons, OnlineBadge, PageHeader, ProgressBar, Show, Table, Time, useAction, useDebounced, useLoad } from "../ui.tsx";

/** Adds the selected devices to a group in one request (the group's membership change). */
function AddToGroup(props: { devices: Device[]; groups: Group[]; onClose: () => void; onDone: () => void }) {
  const [group, setGroup] = useState(props.groups[0] ? String(props.groups[0].id) : "");
  const [busy, run] = useAction();
  const submit = async (e: Event) => {
    e.preventDefault();
    const ok = await run(() => api.patch("/api/v2/groups/:id/devices", { id: group }, { add: props.devices.map((d) => d.id), remove: [] }), {
      done: `${props.devices.length} device${props.devices.length === 1 ? "" : "s"} added to the group`,
    });
    if (ok) props.onDone();
  };
  return (
    <Modal title={`Add ${props.devices.length} device${props.devices.length === 1 ? "" : "s"} to a group`} onClose={props.onClose}>
      <form onSubmit={submit}>
        <Field label="Group">
          <select value={group} onChange={(e) => setGroup(e.currentTarget.value)} required>
            {props.groups.map((g) => (
              <option key={g.id} value={g.id}>
                {groupName(g)}
              </option>
            ))}
          </select>
        </Field>
        <ModalButtons error={undefined} onCancel={props.onClose} submit="Add to group" disabled={busy || !group} />
      </form>
    </Modal>
  );
}

/** Creates a DDI target (a board running SWUpdate or RAUC) and shows its token, which the server shows only this once. */
function AddTarget(props: { onClose: () => void; onDone: () => void }) {
  const [form, setForm] = useState({ controller_id: "", name: "", device_type: "" });
  const [made, setMade] = useState<{ controller_id: string; device_id: number; target_token: string }>();
  const [busy, run] = useAction();
  const submit = async (e: Event) => {
    e.preventDefault();
    await run(async () => setMade(await api.post("/api/v1/ddi/targets", {}, form)));
  };
  const field = (key: keyof typeof form) => ({ value: form[key], required: true, onInput: (e: Event) => setForm({ ...form, [key]: (e.currentTarget as HTMLInputElement).value }) });
  if (made) {
    return (
      <Modal title={`Target ${made.controller_id} added`} onClose={props.onDone}>
        <p>Its target token, shown only now (the device sends it as <span class="mono">Authorization: TargetToken …</span>):</p>
        <p class="mono strong" aria-label="Target token">
          {made.target_token}
        </p>
        <p class="hint">SWUpdate: swupdate -u "-t DEFAULT -i {made.controller_id} -u {window.location.origin} -k TOKEN". A lost token is replaced with POST /api/v1/ddi/targets/{made.controller_id}/token.</p>
        <div class="row end">
          <button type="button" onClick={props.onDone}>
            Done
          </button>
        </div>
      </Modal>
    );
  }
  return (
    <Modal title="Add a DDI target (SWUpdate or RAUC)" onClose={props.onClose}>
      <form onSubmit={submit}>
        <Field label="Controller id" hint="What the device calls itself (swupdate -i, rauc-hawkbit-updater's target_name)">
          <input {...field("controller_id")} />
        </Field>
        <Field label="Name">
          <input {...field("name")} />
        </Field>
        <Field label="Device type">
          <input {...field("device_type")} />
        </Field>
        <ModalButtons error={undefined} onCancel={props.onClose} submit="Add target" disabled={busy} />
      </form>
    </Modal>
  );
}

const LIMIT = 50;

function Devices({ query, me }: PageProps) {
  const offset = Math.max(0, Number(query.get("offset")) || 0);
  const sort = (query.get("sort") ?? undefined) as DeviceSort | undefined;
  const descending = query.get("order") === "desc";
  const [adding, setAdding] = useState<{ devices: Device[]; clear: () => void }>();
  const [addingTarget, setAddingTarget] = useState(false);
  const [text, setText] = useState(query.get("q") ?? "");
  const q = useDebounced(text.trim(), 250);
  useEffect(() => {
    if (q !== (query.get("q") ?? "")) replaceQuery({ q, offset: undefined });
  }, [q]);
  const live = useLive();
  const page = useLoad(async () => {
    const { items, total } = await api.page("/api/v2/devices", { limit: LIMIT, offset, q: q || undefined, sort: sort || undefined, order: descending ? "desc" : undefined });
    // Tags are per device: one small request each, for this page only.
    const tags = await Promise.all(items.map((d) => api.get("/api/v2/devices/:id{[0-9]+}/tags", { id: d.id }).catch(() => [] as string[])));
    return { items: items.map((d, i) => ({ ...d, tags: tags[i]! })), total };
  }, [offset, q, sort, descending, live.opened]);
  const groups = useLoad(() => api.get("/api/v2/groups"));
  // Boards someone holds (src/lab/reservations.ts): one request for every readable device.
  const reserved = useLoad(async () => new Map((await api.get("/api/v2/reservations")).map((r) => [r.device_id, r])), [offset, q, live.opened]);
  const nameOfGroup = (id: number) => {
    const group = groups.data?.find((g) => g.id === id);
    return group ? groupName(group) : `#${id}`;
  };
  // A device that reported a new version (stored before its event) is read again at once; one
  // whose update reached 100 % without saying so on its socket, shortly after.
  const shownVersion = (d: { metadata: Record<string, unknown> }) => d.metadata[`${prefixOf(me)}.software.version`];
  const reported = page.data?.items.filter((d) => live.versions.has(d.mac_address) && live.versions.get(d.mac_address) !== shownVersion(d)).map((d) => `${d.id}:${live.versions.get(d.mac_address)}`).join(",");
  const finished = page.data?.items.filter((d) => (live.progress.get(d.mac_address)?.progress ?? 0) >= 100 && live.progress.get(d.mac_address)?.version !== shownVersion(d)).map((d) => d.id).join(",");
  useEffect(() => {
    if (reported) page.reload();
  }, [reported]);
  useEffect(() => {
    if (!finished) return;
    const timer = setTimeout(page.reload, 2000);
    return () => clearTimeout(timer);
  }, [finished]);
  const prefix = prefixOf(me);

  return (
    <>
      <PageHeader title="Devices" sub={page.data ? `${page.data.total.toLocaleString()} ${q ? "matching" : "approved"}` : undefined}>
        <input type="search" class="filter" placeholder="Filter: name, MAC, id, version, type" aria-label="Filter devices" value={text} onInput={(e) => setText(e.currentTarget.value)} />
        {canAdminWrite(me) && (
          <button type="button" onClick={() => setAddingTarget(true)}>
            Add DDI target
          </button>
        )}
      </PageHeader>
      <Show loaded={page}>
        {({ items, total }) => (
          <Table
            rows={items}
            rowKey={(d) => d.id}
            rowAttrs={(d) => ({ "data-mac": d.mac_address })}
            empty={q ? "No device matches the filter." : "No approved devices yet: approve one under Registrations."}
            pager={{ offset, limit: LIMIT, total, onChange: (o) => replaceQuery({ q, sort, order: descending ? "desc" : undefined, offset: o || undefined }) }}
            serverSort={{ key: sort, descending, onChange: (key, desc) => replaceQuery({ q, sort: key, order: key && desc ? "desc" : undefined, offset: undefined }) }}
            select={
              canAdminWrite(me)
                ? {
                    key: (d) => String(d.id),
                    label: (d) => d.name || d.mac_address,
                    actions: (list, clear) => (
                      <button type="button" class="small" disabled={!groups.data?.length} onClick={() => setAdding({ devices: list, clear })}>
                        Add to group…
                      </button>
                    ),
                  }
                : undefined
            }
            columns={[
              {
                head: "Device",
                sortKey: "name",
                cell: (d) => (
                  <>
                    <a href={href(`/devices/${seg(d.id)}`)} class="strong">
                      {d.name || d.mac_address}
                    </a>
                    <div class="muted mono small">{d.mac_address}</div>
                  </>
                ),
              },
              {
                head: "Status",
                cell: (d) => {
                  const progress = live.progress.get(d.mac_address);
                  return (
                    <>
                      <OnlineBadge online={isOnline(live, d.mac_address, d.connected)} />
                      {progress && (
                        <div class="progress-cell" title={`updating to ${progress.version}`}>
                          <ProgressBar value={progress.progress} label={`update of ${d.name || d.mac_address}`} />
                        </div>
                      )}
                    </>
                  );
                },
              },
              {
                head: "Reserved",
                cell: (d) => {
                  const r = reserved.data?.get(d.id);
                  return r ? (
                    <span title={r.note || undefined}>
                      <Badge tone="warn">{r.holder}</Badge> <span class="muted small">until <Time value={r.until} /></span>
                    </span>
                  ) : (
                    <span class="muted">–</span>
                  );
                },
              },
              { head: "Version", class: "mono", sortKey: "version", cell: (d) => String(d.metadata[`${prefix}.software.version`] ?? "–") },
              { head: "Type", class: "hide-narrow", sortKey: "type", cell: (d) => String(d.metadata[`${prefix}.hardware.devtype`] ?? "–") },
              {
                head: "Groups",
                class: "hide-narrow",
                cell: (d) =>
                  d.groups.map((g) => (
                    <Badge key={g} tone="info">
                      {nameOfGroup(g)}
                    </Badge>
                  )),
              },
              { head: "Tags", class: "hide-narrow", cell: (d) => d.tags.map((t) => <Badge key={t}>{t}</Badge>) },
              { head: "Last access", sortKey: "last_access", cell: (d) => <Time value={d.last_access} /> },
            ]}
          />
        )}
      </Show>
      {addingTarget && (
        <AddTarget
          onClose={() => setAddingTarget(false)}
          onDone={() => {
            setAddingTarget(false);
            page.reload();
          }}
        />
      )}
      {adding && groups.data && (
        <AddToGroup
          devices={adding.devices}
          groups={groups.data}
          onClose={() => setAdding(undefined)}
          onDone={() => {
            adding.clear();
            setAdding(undefined);
            page.reload();
          }}
        />
      )}
    </>
  );
}

export const devicesPage: Page = { path: "/devices", title: "Devices", component: Devices, nav: { section: "Update server", label: "Devices", order: 10 } };
