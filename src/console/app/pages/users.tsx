import { useMemo, useState } from "preact/hooks";
import type { Account } from "../../../accounts/schema.ts";
import { api } from "../api.ts";
import { type Page, type PageProps } from "../router.ts";
import { canAdminWrite, isAdmin, prefixOf } from "../session.ts";
import type { NamedPermission as Permission } from "../../../update/permissions/schema.ts";
import { groupName, packageLabel } from "../update.ts";
import { Badge, Card, Field, PageHeader, Show, Table, Time, timeOf, useAction, useDebounced, useFormErrors, useLoad } from "../ui.tsx";

/** One account's permissions on one thing, folded into a row (a group's creator holds three). */
interface Held {
  key: string;
  user: string;
  on: Permission;
  permissions: Permission[];
}
const fold = (list: Permission[]): Held[] => {
  const rows = new Map<string, Held>();
  for (const p of list) {
    const key = `${p.user_id}\n${p.resource}\n${p.resource_id ?? ""}\n${p.resource_name ?? ""}`;
    const row = rows.get(key) ?? { key, user: p.user_id, on: p, permissions: [] };
    row.permissions.push(p);
    rows.set(key, row);
  }
  return [...rows.values()];
};

/** What a permission is on, by name: a device's or group's name, a package's version and type; the id beside it. */
function On(props: { p: Permission }) {
  const { p } = props;
  if (p.resource === "device_by_tag") return <>devices with tag or name <span class="strong">{p.resource_name}</span></>;
  return (
    <>
      {p.resource} <span class="strong">{p.resource_label ?? `#${p.resource_id}`}</span> {p.resource_label && <span class="mono small muted">#{p.resource_id}</span>}
    </>
  );
}

/** Scope names without the prefix, with what they give. */
const SCOPES: Array<[string, string]> = [
  ["admin_rw", "everything"],
  ["admin_ro", "read everything"],
  ["create_group", "create groups"],
  ["upload_single_file", "upload single-file packages"],
  ["upload_rootfs_image", "upload rootfs images"],
  ["upload_nonstandard_artifact", "upload other artifacts"],
  ["tests_rw", "test runs: runs commands on the gateway"],
  ["tests_ro", "read test runs"],
];
const RESOURCES = ["device", "device_by_tag", "group", "package"];
const PERMISSIONS = ["read", "update", "delete", "shell", "test", "power"];

function Users({ me }: PageProps) {
  const accounts = useLoad(() => api.get("/api/v1/users"));
  // With names=true every permission carries its resource's label.
  const permissions = useLoad(async () => (await api.get("/api/v1/permissions", { names: "true" })) as Permission[]);
  const [busy, run] = useAction();
  const writable = canAdminWrite(me);
  const prefix = prefixOf(me);

  const toggle = async (a: Account) => {
    const ok = await run(() => api.patch("/api/v1/users/:name", { name: a.name }, { disabled: !a.disabled }), {
      confirm: a.disabled ? undefined : [`Disable ${a.name}?`, { body: "The account can no longer sign in; its sessions and tokens end at once.", confirm: "Disable" }],
      done: a.disabled ? `${a.name} enabled` : `${a.name} disabled`,
    });
    if (ok) accounts.reload();
  };
  const remove = async (a: Account) => {
    const ok = await run(() => api.delete("/api/v1/users/:name", { name: a.name }), {
      confirm: [`Delete ${a.name}?`, { body: "Its sessions and tokens end at once and its permissions go. This cannot be undone.", confirm: "Delete" }],
      done: `${a.name} deleted`,
    });
    if (ok) {
      accounts.reload();
      permissions.reload();
    }
  };
  const password = async (a: Account) => {
    const value = window.prompt(`New password for ${a.name} (its sessions end)`);
    if (!value) return;
    await run(() => api.patch("/api/v1/users/:name", { name: a.name }, { password: value }), { done: `Password of ${a.name} changed` });
  };
  const revoke = async (p: Permission) => {
    const on = p.resource_label ?? p.resource_name ?? `#${p.resource_id}`;
    if (await run(() => api.delete("/api/v1/permissions/:id{[0-9]+}", { id: p.id }), { confirm: [`Remove ${p.user_id}'s ${p.permission} on ${p.resource} ${on}?`, { confirm: "Remove" }], done: "Permission removed" }))
      permissions.reload();
  };

  return (
    <>
      <PageHeader title="Users" sub="Console accounts, and per-user permissions on devices, groups and packages. Scripts use tokens: labgate token issue --user NAME --scopes …" />
      <Card title="Accounts">
        <Show loaded={accounts}>
          {(list) => (
            <Table
              rows={list}
              rowKey={(a) => a.name}
              rowAttrs={(a) => ({ "data-account": a.name })}
              columns={[
                {
                  head: "Account",
                  sort: (a) => a.name,
                  cell: (a) => (
                    <>
                      <span class="strong">{a.name}</span> {a.disabled ? <Badge tone="bad">disabled</Badge> : <Badge tone="ok">active</Badge>}
                    </>
                  ),
                },
                {
                  head: "Scopes",
                  cell: (a) => (
                    <>
                      {a.scopes.length === 0 && <span class="muted small">none: permissions only</span>}
                      {a.scopes.map((s) => (
                        <Badge key={s} tone="info">
                          {s.replace(`${prefix}_`, "")}
                        </Badge>
                      ))}
                    </>
                  ),
                },
                { head: "Last sign-in", class: "hide-narrow", sort: (a) => timeOf(a.last_login), cell: (a) => <Time value={a.last_login} /> },
                {
                  head: "",
                  class: "actions",
                  cell: (a) =>
                    writable && (
                      <>
                        <button type="button" class="small" disabled={busy} onClick={() => password(a)}>
                          Password
                        </button>{" "}
                        <button type="button" class={`small ${a.disabled ? "" : "danger"}`} disabled={busy} onClick={() => toggle(a)}>
                          {a.disabled ? "Enable" : "Disable"}
                        </button>{" "}
                        <button type="button" class="small danger" disabled={busy} onClick={() => remove(a)}>
                          Delete
                        </button>
                      </>
                    ),
                },
              ]}
            />
          )}
        </Show>
        {writable && <NewAccount prefix={prefix} onCreated={accounts.reload} />}
      </Card>
      <Card title="Permissions">
        <p class="hint">
          A permission gives one account read, update, delete or shell on one device, the devices with a tag (or name), a group (and so its devices and packages), or a
          package. Accounts with admin scopes need none.
        </p>
        <Show loaded={permissions}>
          {(list) => (
            <Table
              rows={fold(list)}
              rowKey={(h) => h.key}
              rowAttrs={(h) => ({ "data-user": h.user })}
              label="Permissions"
              empty="No permissions."
              columns={[
                { head: "Account", sort: (h) => h.user, cell: (h) => h.user },
                { head: "On", sort: (h) => `${h.on.resource} ${h.on.resource_label ?? h.on.resource_name ?? ""}`, cell: (h) => <On p={h.on} /> },
                {
                  head: "Permissions",
                  cell: (h) => (
                    <span class="held">
                      {h.permissions.map((p) => (
                        <span key={p.id} class="held-one">
                          <Badge tone="info">{p.permission}</Badge>
                          {writable && (
                            <button type="button" class="link small" disabled={busy} aria-label={`Remove ${p.user_id}'s ${p.permission}`} onClick={() => revoke(p)}>
                              ×
                            </button>
                          )}
                        </span>
                      ))}
                    </span>
                  ),
                },
              ]}
            />
          )}
        </Show>
        {writable && <NewPermission accounts={accounts.data ?? []} prefix={prefix} onCreated={permissions.reload} />}
      </Card>
    </>
  );
}

function NewAccount(props: { prefix: string; onCreated: () => void }) {
  const [busy, run] = useAction();
  const errors = useFormErrors(["name", "password"]);
  const submit = async (e: Event) => {
    e.preventDefault();
    const formEl = e.currentTarget as HTMLFormElement;
    const data = new FormData(formEl);
    const name = String(data.get("name")).trim();
    const scopes = data.getAll("scope").map((s) => `${props.prefix}_${String(s)}`);
    errors.set(undefined);
    const create = () =>
      api.post("/api/v1/users", {}, { name, password: String(data.get("password")), scopes }).catch((error: unknown) => {
        errors.set(error);
        throw error;
      });
    if (await run(create, { done: `Account ${name} created`, quiet: true })) {
      formEl.reset();
      props.onCreated();
    }
  };
  return (
    <details style={{ marginTop: "14px" }}>
      <summary class="strong">Add an account</summary>
      <form onSubmit={submit} style={{ marginTop: "10px" }}>
        <div class="form-row">
          <Field label="Name" error={errors.at("name")}>
            <input name="name" required autocomplete="off" />
          </Field>
          <Field label="Password" error={errors.at("password")}>
            <input name="password" type="password" required autocomplete="new-password" />
          </Field>
        </div>
        <div class="field" style={{ marginTop: "10px" }}>
          <span class="field-label">Scopes</span>
          <div class="checks">
            {SCOPES.map(([s, what]) => (
              <label key={s} title={what}>
                <input type="checkbox" name="scope" value={s} /> {s}
              </label>
            ))}
          </div>
          <span class="hint">None: the account sees only what its permissions below allow.</span>
        </div>
        {errors.foot && (
          <p class="form-error" role="alert">
            {errors.foot}
          </p>
        )}
        <button type="submit" class="primary" disabled={busy}>
          Create account
        </button>
      </form>
    </details>
  );
}

function NewPermission(props: { accounts: Account[]; prefix: string; onCreated: () => void }) {
  const [busy, run] = useAction();
  const [resource, setResource] = useState("device");
  const [picked, setPicked] = useState("");
  const submit = async (e: Event) => {
    e.preventDefault();
    const formEl = e.currentTarget as HTMLFormElement;
    const data = new FormData(formEl);
    const target = resource === "device_by_tag" ? String(data.get("target")).trim() : picked;
    if (!target) return;
    const body = {
      user_id: String(data.get("user")),
      resource,
      permission: String(data.get("permission")),
      ...(resource === "device_by_tag" ? { resource_name: target } : { resource_id: Number(target) }),
    };
    if (await run(() => api.post("/api/v1/permissions", {}, body), { done: "Permission added" })) {
      formEl.reset();
      props.onCreated();
    }
  };
  return (
    <form class="form-row" onSubmit={submit} style={{ marginTop: "14px" }}>
      <Field label="Account">
        <select name="user" required>
          {props.accounts.map((a) => (
            <option key={a.name} value={a.name}>
              {a.name}
            </option>
          ))}
        </select>
      </Field>
      <Field label="Permission">
        <select name="permission">
          {PERMISSIONS.map((p) => (
            <option key={p}>{p}</option>
          ))}
        </select>
      </Field>
      <Field label="On">
        <select
          name="resource"
          value={resource}
          onChange={(e) => {
            setResource(e.currentTarget.value);
            setPicked("");
          }}
        >
          {RESOURCES.map((r) => (
            <option key={r} value={r}>
              {r === "device_by_tag" ? "devices with tag or name" : r}
            </option>
          ))}
        </select>
      </Field>
      {resource === "device_by_tag" ? (
        <Field label="Tag or device name">
          <input name="target" required style={{ width: "140px" }} />
        </Field>
      ) : (
        <Picker key={resource} resource={resource as "device" | "group" | "package"} prefix={props.prefix} value={picked} onPick={setPicked} />
      )}
      <button type="submit" disabled={busy || (resource !== "device_by_tag" && !picked)}>
        Add permission
      </button>
    </form>
  );
}

/** Picks a device (searched on the server by name, MAC or id), a group or a package by name; `value` is its id. */
function Picker(props: { resource: "device" | "group" | "package"; prefix: string; value: string; onPick: (id: string) => void }) {
  const [text, setText] = useState("");
  const q = useDebounced(text.trim(), 250);
  const options = useLoad(async (): Promise<Array<{ id: number; label: string }>> => {
    if (props.resource === "group") return (await api.get("/api/v2/groups")).map((g) => ({ id: g.id, label: groupName(g) }));
    if (props.resource === "package") return (await api.get("/api/v1/packages")).map((p) => ({ id: p.id, label: packageLabel(p, props.prefix) }));
    return (await api.page("/api/v2/devices", { limit: 20, sort: "name", q: q || undefined })).items.map((d) => ({ id: d.id, label: `${d.name || d.mac_address} (${d.mac_address})` }));
  }, [props.resource, q]);
  const list = useMemo(() => options.data ?? [], [options.data]);
  return (
    <Field label={props.resource === "device" ? "Device" : props.resource === "group" ? "Group" : "Package"}>
      <span class="picker">
        {props.resource === "device" && (
          <input type="search" aria-label="Find a device" placeholder="name, MAC or id" value={text} onInput={(e) => setText(e.currentTarget.value)} />
        )}
        <select aria-label={`Choose a ${props.resource}`} value={props.value} onChange={(e) => props.onPick(e.currentTarget.value)} required>
          <option value="">{list.length === 0 ? `no ${props.resource} found` : `choose a ${props.resource}…`}</option>
          {list.map((o) => (
            <option key={o.id} value={String(o.id)}>
              {o.label}
            </option>
          ))}
        </select>
      </span>
    </Field>
  );
}

export const usersPage: Page = { path: "/users", title: "Users", component: Users, nav: { section: "Administration", label: "Users", order: 10 }, visible: isAdmin };
