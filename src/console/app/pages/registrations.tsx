import { api } from "../api.ts";
import { type Page, type PageProps, href, replaceQuery } from "../router.ts";
import { canAdminWrite, isAdmin, prefixOf } from "../session.ts";
import type { PendingRegistration as Pending, RegisterBulkResult } from "../../../update/registration/schema.ts";
import { type ActionOptions, Badge, notify, PageHeader, Show, Table, Time, useAction, useEvery, useLoad } from "../ui.tsx";

/** A fingerprint as groups of four hex digits (the first 32 digits; the whole one as a tooltip). */
function Fingerprint(props: { value: string | null }) {
  if (!props.value) return <span class="muted">–</span>;
  const short = props.value.slice(0, 32).match(/.{1,4}/g)!.join(" ");
  return (
    <span class="mono small" title={`SHA-256 ${props.value}`}>
      {short}…
    </span>
  );
}

/** Registrations a page: a flood of thousands stays a small answer. */
const LIMIT = 50;

function Registrations({ me, query }: PageProps) {
  const offset = Math.max(0, Number(query.get("offset")) || 0);
  const pending = useLoad(async () => {
    const page = await api.page("/api/v1/auth/pending", { details: "true", limit: LIMIT, offset });
    // With details=true every entry has all its fields (the reference's four otherwise).
    return { ...page, items: page.items as Pending[] };
  }, [offset]);
  const [busy, run] = useAction();
  const prefix = prefixOf(me);
  const writable = canAdminWrite(me);
  // Devices ask again every few seconds until approved (no event announces a request): keep the list current.
  useEvery(5000, pending.reload);

  const approve = async (p: Pending) => {
    const name = String(p.metadata[`${prefix}.device.name`] ?? p.mac_address);
    const confirm: ActionOptions = p.key_change
      ? {
          confirm: [
            `Replace the key of device ${p.device_id}?`,
            {
              body: (
                <>
                  <p class="warn-box">
                    A device with MAC <code>{p.mac_address}</code> is already approved with another key. Approve only if that device really has a new key (reinstalled,
                    new storage); otherwise this may be another machine using its MAC.
                  </p>
                  <dl class="props" style={{ marginBottom: "8px" }}>
                    <dt>Current key:</dt>
                    <dd>
                      <Fingerprint value={p.device_key_fingerprint} />
                    </dd>
                    <dt>New key:</dt>
                    <dd>
                      <Fingerprint value={p.key_fingerprint} />
                    </dd>
                  </dl>
                  <p class="muted">
                    On the device, <code>labgate agent --fingerprint</code> prints its key's fingerprint: it must be the new key's. The old key stops working at once; the device keeps
                    its id, groups and tags.
                  </p>
                </>
              ),
              confirm: "Replace the key",
            },
          ],
          done: `${name}: new key approved`,
        }
      : { done: `${name} approved` };
    const ok = await run(() => api.post("/api/v1/auth/register", {}, { mac_address: p.mac_address, public_key: p.public_key, confirm_key_change: p.key_change }), confirm);
    if (ok) pending.reload();
  };
  // Key changes are left out: each is approved on its own, through the confirmation that shows both keys.
  const approveAll = async (list: Pending[], clear: () => void) => {
    const plain = list.filter((p) => !p.key_change);
    let answer: RegisterBulkResult | undefined;
    const ok = await run(
      async () => {
        answer = await api.post("/api/v1/auth/register/bulk", {}, { registrations: plain.map((p) => ({ mac_address: p.mac_address, public_key: p.public_key })) });
      },
      { confirm: [`Approve ${plain.length} device${plain.length === 1 ? "" : "s"}?`, { body: "Each becomes an approved device and may download updates.", confirm: "Approve", danger: false }] },
    );
    if (!ok || !answer) return;
    const refused = answer.results.filter((r) => r.error);
    const skipped = list.length - plain.length;
    notify(
      `${answer.approved} approved${refused.length ? `; ${refused.length} not: ${refused[0]!.error}` : ""}${skipped ? `; ${skipped} key change${skipped === 1 ? "" : "s"} left to approve one by one` : ""}`,
      refused.length ? "error" : "ok",
    );
    clear();
    pending.reload();
  };
  const remove = async (p: Pending) => {
    const ok = await run(() => api.delete("/api/v1/auth/pending", {}, { mac_address: p.mac_address, public_key: p.public_key }), {
      confirm: [`Remove the request of ${p.mac_address}?`, { body: "If the device keeps asking, it appears here again.", confirm: "Remove" }],
      done: "Request removed",
    });
    if (ok) pending.reload();
  };

  return (
    <>
      <PageHeader
        title="Registrations"
        sub={`${pending.data ? `${pending.data.total.toLocaleString()} waiting. ` : ""}Devices asking to be approved, in the order they first asked. Compare the key fingerprint with the one the agent prints (at start, or with labgate agent --fingerprint) before approving.`}
      >
        <button type="button" onClick={pending.reload}>
          Refresh
        </button>
      </PageHeader>
      <Show loaded={pending}>
        {({ items, total }) => (
          <Table
            rows={items}
            pager={{ offset, limit: LIMIT, total, onChange: (o) => replaceQuery({ offset: o || undefined }) }}
            rowKey={(p) => p.mac_address + p.key_fingerprint}
            rowAttrs={(p) => ({ "data-mac": p.mac_address })}
            select={
              writable
                ? {
                    key: (p) => p.mac_address + p.key_fingerprint,
                    label: (p) => String(p.metadata[`${prefix}.device.name`] ?? p.mac_address),
                    actions: (list, clear) => (
                      <button type="button" class="primary small" disabled={busy} onClick={() => approveAll(list, clear)}>
                        Approve {list.length}
                      </button>
                    ),
                  }
                : undefined
            }
            empty="No pending registrations. A device appears here when its agent first contacts the server."
            columns={[
              {
                head: "Device",
                cell: (p) => (
                  <>
                    <div class="strong">{String(p.metadata[`${prefix}.device.name`] ?? p.mac_address)}</div>
                    <div class="mono small muted">{p.mac_address}</div>
                    {p.key_change && (
                      <Badge tone="warn" title="Approving replaces the key of an approved device">
                        key change: <a href={href(`/devices/${p.device_id}`)}>device {p.device_id}</a>
                      </Badge>
                    )}
                  </>
                ),
              },
              {
                head: "Type / version",
                class: "hide-narrow",
                cell: (p) => (
                  <>
                    {String(p.metadata[`${prefix}.hardware.devtype`] ?? "–")} · <span class="mono">{String(p.metadata[`${prefix}.software.version`] ?? "–")}</span>
                    {p.protocol === "mender" ? " · Mender client" : ""}
                  </>
                ),
              },
              { head: "Key fingerprint", cell: (p) => <Fingerprint value={p.key_fingerprint} /> },
              { head: "Last asked", class: "hide-narrow", cell: (p) => <Time value={p.last_appeared} /> },
              writable && {
                head: "",
                class: "actions",
                cell: (p) => (
                  <>
                    <button type="button" class="primary small" disabled={busy} onClick={() => approve(p)}>
                      {p.key_change ? "Approve key change" : "Approve"}
                    </button>{" "}
                    <button type="button" class="danger small" disabled={busy} onClick={() => remove(p)}>
                      Remove
                    </button>
                  </>
                ),
              },
            ]}
          />
        )}
      </Show>
    </>
  );
}

export const registrationsPage: Page = {
  path: "/registrations",
  title: "Registrations",
  component: Registrations,
  nav: { section: "Update server", label: "Registrations", order: 20 },
  visible: isAdmin,
};
