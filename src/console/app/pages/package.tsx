import { Fragment } from "preact";
import { useEffect, useState } from "preact/hooks";
import { api } from "../api.ts";
import { href, type Page, type PageProps } from "../router.ts";
import { prefixOf } from "../session.ts";
import type { Package } from "../../../update/packages/schema.ts";
import { SignatureBadge } from "../signature.tsx";
import { Badge, Card, copyText, Empty, formatBytes, PageHeader, ProgressBar, Show, Table, Time, useAction, useLoad } from "../ui.tsx";

/**
 * Deltas of this package (POST /api/v1/packages/{id}/delta): made from another package of its
 * device type by the gateway, one at a time; their progress is polled while one is under way.
 */
function Deltas({ pkg, prefix }: { pkg: Package; prefix: string }) {
  const all = useLoad(() => api.get("/api/v1/packages"));
  const jobs = useLoad(() => api.get("/api/v1/packages/deltas"));
  const [from, setFrom] = useState("");
  const [busy, run] = useAction();
  const meta = (p: Package, key: string) => p.metadata[`${prefix}.${key}`];
  const mine = (jobs.data ?? []).filter((j) => j.target === pkg.id);
  const working = mine.some((j) => j.state === "queued" || j.state === "running");
  useEffect(() => {
    if (!working) return;
    const timer = setInterval(() => jobs.reload(), 1000);
    return () => clearInterval(timer);
  }, [working]);
  const bases = (all.data ?? []).filter((p) => p.id !== pkg.id && meta(p, "hardware.devtype") === meta(pkg, "hardware.devtype") && meta(p, "software.version") !== meta(pkg, "software.version") && meta(p, "delta.target") === undefined);
  const make = () => run(() => api.post("/api/v1/packages/:id/delta", { id: pkg.id }, { from: Number(from) }), { done: "Delta queued" }).then(() => jobs.reload());
  return (
    <Card title="Deltas to this version">
      <div class="row">
        <select aria-label="Delta from" value={from} onChange={(e) => setFrom(e.currentTarget.value)}>
          <option value="">from the package of…</option>
          {bases.map((p) => (
            <option key={p.id} value={p.id}>
              {String(meta(p, "software.version"))} (#{p.id})
            </option>
          ))}
        </select>
        <button type="button" disabled={busy || from === ""} onClick={make}>
          Make a delta
        </button>
      </div>
      <ul class="plain-list" aria-label="Deltas">
        {mine.map((j) => (
          <li key={j.id} data-delta-job={j.state}>
            from #{j.base}: {j.state === "done" && j.package ? <a href={href(`/packages/${j.package}`)}>package #{j.package}</a> : j.state === "failed" ? <Badge tone="bad">{j.error ?? "failed"}</Badge> : <ProgressBar value={j.progress} label={`delta from #${j.base}`} />}
          </li>
        ))}
      </ul>
    </Card>
  );
}

/** A package at its own address: what it is (metadata, stored file, full SHA-256) and where it is used (groups, deployments). */
function PackagePage({ params, me }: PageProps) {
  const id = params.id!;
  const prefix = prefixOf(me);
  const pkg = useLoad(() => api.get("/api/v1/packages/:id", { id }), [id]);
  const usage = useLoad(() => api.get("/api/v1/packages/:id/usage", { id }), [id]);
  const [busy, run] = useAction();
  const copy = (text: string, done: string) => run(() => copyText(text), { done });
  const link = () =>
    run(async () => {
      const { download_url } = await api.get("/api/v1/packages/:id/download", { id });
      await copyText(download_url);
    }, { done: "Download link copied (it expires)" });
  return (
    <Show loaded={pkg}>
      {(p) => {
        const meta = (key: string) => p.metadata[`${prefix}.${key}`];
        return (
          <>
            <PageHeader title={<span class="mono">{String(meta("software.version") ?? `Package ${p.id}`)}</span>} sub={<a href={href("/packages")}>‹ All packages</a>}>
              <button type="button" disabled={busy} onClick={link}>
                Copy download link
              </button>
            </PageHeader>
            <div class="config-layout">
              <Card title="Package">
                <dl class="props">
                  <dt>Version</dt>
                  <dd class="mono">{String(meta("software.version") ?? "–")}</dd>
                  <dt>Device type</dt>
                  <dd>{String(meta("hardware.devtype") ?? "–")}</dd>
                  <dt>Size</dt>
                  <dd>{formatBytes(Number(meta("storage.local.length")))}</dd>
                  <dt>Stored as</dt>
                  <dd class="mono small wrap-anywhere">{String(meta("storage.local.uuid") ?? "–")}</dd>
                  <dt>SHA-256</dt>
                  <dd>
                    <span class="mono small wrap-anywhere" data-sha256>
                      {p.sha256}
                    </span>{" "}
                    <button type="button" class="small" disabled={busy} onClick={() => copy(p.sha256, "SHA-256 copied")}>
                      Copy
                    </button>
                  </dd>
                  <dt>Signature</dt>
                  <dd class="wrap-anywhere" data-signature>
                    <SignatureBadge pkg={p} prefix={prefix} long />
                  </dd>
                  <dt>Uploaded</dt>
                  <dd>
                    <Time value={p.created} />
                  </dd>
                </dl>
              </Card>
              <Card title="Used by">
                <Show loaded={usage}>
                  {(u) =>
                    u.groups.length === 0 ? (
                      <Empty>No group has this package: no device installs it.</Empty>
                    ) : (
                      <ul class="plain-list" aria-label="Groups">
                        {u.groups.map((g) => (
                          <li key={g.id}>
                            <a href={href(`/groups/${g.id}`)}>{g.name ?? `Group ${g.id}`}</a>
                          </li>
                        ))}
                      </ul>
                    )
                  }
                </Show>
              </Card>
            </div>
            <Card title="Deployments of this version">
              <Show loaded={usage}>
                {(u) => (
                  <Table
                    rows={u.deployments}
                    rowKey={(d) => d.id}
                    label="Deployments"
                    empty="None to the groups that have it."
                    columns={[
                      { head: "Deployment", cell: (d) => <a href={href(`/deployments/${d.id}`)}>#{d.id}</a> },
                      { head: "Group", cell: (d) => u.groups.find((g) => g.id === d.group_id)?.name ?? `Group ${d.group_id}` },
                      { head: "Status", cell: (d) => <Badge tone={d.status === "finished" ? "ok" : d.status === "failed" || d.status === "aborted" ? "bad" : "info"}>{d.status}</Badge> },
                      { head: "Created", cell: (d) => <Time value={d.created} /> },
                    ]}
                  />
                )}
              </Show>
            </Card>
            {meta("delta.target") === undefined && <Deltas pkg={p} prefix={prefix} />}
            <Card title="Metadata">
              <dl class="props">
                {Object.entries(p.metadata).map(([k, v]) => (
                  <Fragment key={k}>
                    <dt class="mono small">{k}</dt>
                    <dd class="mono small wrap-anywhere">{Array.isArray(v) ? v.join(", ") : String(v)}</dd>
                  </Fragment>
                ))}
              </dl>
            </Card>
          </>
        );
      }}
    </Show>
  );
}

export const packagePage: Page = { path: "/packages/:id", title: "Package", component: PackagePage };
