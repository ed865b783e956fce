import { useState } from "preact/hooks";
import type { Account } from "../../../accounts/schema.ts";
import { api, get, seg } from "../api.ts";
import { type Page, type PageProps } from "../router.ts";
import { canAdminWrite, isAdmin, prefixOf } from "../session.ts";
import type { PermissionObject as Permission } from "../../../update/permissions/schema.ts";
import { Badge, Card, Field, PageHeader, Show, Table, Time, timeOf, useAction, useLoad } from "../ui.tsx";

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
  const accounts = useLoad(() => get<Account[]>("/api/v1/users"));
  const permissions = useLoad(() => get<Permission[]>("/api/v1/permissions"));
  const [busy, run] = useAction();
  const writable = canAdminWrite(me);
  const prefix = prefixOf(me);

  const toggle = async (a: Account) => {
    const ok = await run(() => api("PATCH", `/api/v1/users/${seg(a.name)}`, { json: { disabled: !a.disabled } }), {
      confirm: a.disabled ? undefined : [`Disable ${a.name}?`, { body: "The account can no longer sign in; its sessions and tokens end at once.", confirm: "Disable" }],
      done: a.disabled ? `${a.name} enabled` : `${a.name} disabled`,
    });
    if (ok) accounts.reload();
  };
  const remove = async (a: Account) => {
    const ok = await run(() => api("DELETE", `/api/v1/users/${seg(a.name)}`), {
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
    await run(() => api("PATCH", `/api/v1/users/${seg(a.name)}`, { json: { password: value } }), { done: `Password of ${a.name} changed` });
  };
  const revoke = async (p: Permission) => {
    if (await run(() => api("DELETE", `/api/v1/permissions/${p.id}`), { confirm: [`Remove ${p.user_id}'s ${p.permission} on ${p.resource} ${p.resource_id ?? p.resource_name}?`, { confirm: "Remove" }], done: "Permission removed" }))
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
              rows={list}
              rowKey={(p) => p.id}
              empty="No permissions."
              columns={[
                { head: "Account", sort: (p) => p.user_id, cell: (p) => p.user_id },
                { head: "Permission", sort: (p) => p.permission, cell: (p) => <Badge tone="info">{p.permission}</Badge> },
                {
                  head: "On",
                  sort: (p) => p.resource,
                  cell: (p) => (
                    <>
                      {p.resource} <span class="mono">{p.resource_id ?? p.resource_name}</span>
                    </>
                  ),
                },
                {
                  head: "",
                  class: "actions",
                  cell: (p) =>
                    writable && (
                      <button type="button" class="small danger" disabled={busy} onClick={() => revoke(p)}>
                        Remove
                      </button>
                    ),
                },
              ]}
            />
          )}
        </Show>
        {writable && <NewPermission accounts={accounts.data ?? []} onCreated={permissions.reload} />}
      </Card>
    </>
  );
}

function NewAccount(props: { prefix: string; onCreated: () => void }) {
  const [busy, run] = useAction();
  const submit = async (e: Event) => {
    e.preventDefault();
    const formEl = e.currentTarget as HTMLFormElement;
    const data = new FormData(formEl);
    const name = String(data.get("name")).trim();
    const scopes = data.getAll("scope").map((s) => `${props.prefix}_${String(s)}`);
    if (await run(() => api("POST", "/api/v1/users", { json: { name, password: String(data.get("password")), scopes } }), { done: `Account ${name} created` })) {
      formEl.reset();
      props.onCreated();
    }
  };
  return (
    <details style={{ marginTop: "14px" }}>
      <summary class="strong">Add an account</summary>
      <form onSubmit={submit} style={{ marginTop: "10px" }}>
        <div class="form-row">
          <Field label="Name">
            <input name="name" required autocomplete="off" />
          </Field>
          <Field label="Password">
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
        <button type="submit" class="primary" disabled={busy}>
          Create account
        </button>
      </form>
    </details>
  );
}

function NewPermission(props: { accounts: Account[]; onCreated: () => void }) {
  const [busy, run] = useAction();
  const [resource, setResource] = useState("device");
  const submit = async (e: Event) => {
    e.preventDefault();
    const formEl = e.currentTarget as HTMLFormElement;
    const data = new FormData(formEl);
    const target = String(data.get("target")).trim();
    const body = {
      user_id: String(data.get("user")),
      resource,
      permission: String(data.get("permission")),
      ...(resource === "device_by_tag" ? { resource_name: target } : { resource_id: Number(target) }),
    };
    if (await run(() => api("POST", "/api/v1/permissions", { json: body }), { done: "Permission added" })) {
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
        <select name="resource" value={resource} onChange={(e) => setResource(e.currentTarget.value)}>
          {RESOURCES.map((r) => (
            <option key={r} value={r}>
              {r === "device_by_tag" ? "devices with tag or name" : r}
            </option>
          ))}
        </select>
      </Field>
      <Field label={resource === "device_by_tag" ? "Tag or device name" : `${resource} id`}>
        <input name="target" required style={{ width: "140px" }} inputMode={resource === "device_by_tag" ? "text" : "numeric"} pattern={resource === "device_by_tag" ? undefined : "[0-9]+"} />
      </Field>
      <button type="submit" disabled={busy}>
        Add permission
      </button>
    </form>
  );
}

export const usersPage: Page = { path: "/users", title: "Users", component: Users, nav: { section: "Administration", label: "Users", order: 10 }, visible: isAdmin };
