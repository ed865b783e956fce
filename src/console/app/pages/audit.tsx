import { useEffect, useState } from "preact/hooks";
import { api, pathOf } from "../api.ts";
import { replaceQuery, type Page, type PageProps } from "../router.ts";
import { isAdmin } from "../session.ts";
import { auditColumns, auditQuery, FILTERS, type Filters } from "../audit.tsx";
import { Field, PageHeader, Show, Table, useDebounced, useLoad } from "../ui.tsx";

const LIMIT = 50;

function Audit({ query }: PageProps) {
  const offset = Math.max(0, Number(query.get("offset")) || 0);
  const [form, setForm] = useState<Filters>(() => Object.fromEntries(FILTERS.map((k) => [k, query.get(k) ?? ""])) as Filters);
  const filters = useDebounced(form, 300);
  useEffect(() => {
    if (FILTERS.some((k) => filters[k] !== (query.get(k) ?? ""))) replaceQuery({ ...filters, offset: undefined });
  }, [filters]);
  const page = useLoad(() => api.page("/api/v1/audit", auditQuery(filters, { limit: String(LIMIT), offset: String(offset) })), [offset, JSON.stringify(filters)]);
  const set = (key: keyof Filters) => (e: { currentTarget: HTMLInputElement }) => setForm({ ...form, [key]: e.currentTarget.value });

  return (
    <>
      <PageHeader title="Audit log" sub={page.data ? `${page.data.total.toLocaleString()} entries` : undefined}>
        <a class="button" href={pathOf("/api/v1/audit", auditQuery(filters, { format: "csv" }))} download="audit.csv">
          Download CSV
        </a>
      </PageHeader>
      <form class="form-row" onSubmit={(e) => e.preventDefault()} aria-label="Filter the audit log">
        <Field label="Actor">
          <input name="actor" value={form.actor} onInput={set("actor")} placeholder="alice, a MAC address" />
        </Field>
        <Field label="Action">
          <input name="action" value={form.action} onInput={set("action")} placeholder="device, group.policy" />
        </Field>
        <Field label="Target">
          <input name="target" value={form.target} onInput={set("target")} placeholder="device:3, user:alice" />
        </Field>
        <Field label="From">
          <input name="since" type="date" value={form.since} onInput={set("since")} />
        </Field>
        <Field label="To">
          <input name="until" type="date" value={form.until} onInput={set("until")} />
        </Field>
      </form>
      <Show loaded={page}>
        {({ items, total }) => (
          <Table
            rows={items}
            rowKey={(e) => e.id}
            rowAttrs={(e) => ({ "data-action": e.action })}
            empty="No entry matches."
            label="Audit log"
            pager={{ offset, limit: LIMIT, total, onChange: (o) => replaceQuery({ ...filters, offset: o || undefined }) }}
            columns={auditColumns}
          />
        )}
      </Show>
    </>
  );
}

export const auditPage: Page = { path: "/audit", title: "Audit log", component: Audit, nav: { section: "Administration", label: "Audit log", order: 20 }, visible: isAdmin };
