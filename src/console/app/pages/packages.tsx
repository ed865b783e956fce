import { useRef, useState } from "preact/hooks";
import { api, messageOf, upload } from "../api.ts";
import { href, type Page, type PageProps } from "../router.ts";
import { prefixOf } from "../session.ts";
import type { Package } from "../../../update/packages/schema.ts";
import { SignatureBadge } from "../signature.tsx";
import { Card, copyText, Field, formatBytes, notify, PageHeader, ProgressBar, Show, Table, Time, timeOf, useAction, useLoad } from "../ui.tsx";


function Packages({ me }: PageProps) {
  const packages = useLoad(() => api.get("/api/v1/packages"));
  const [busy, run] = useAction();
  const prefix = prefixOf(me);
  const meta = (p: Package, key: string) => p.metadata[`${prefix}.${key}`];
  const size = (p: Package) => Number(meta(p, "storage.local.length"));

  const copyLink = (p: Package) =>
    run(async () => {
      const { download_url } = await api.get("/api/v1/packages/:id/download", { id: p.id });
      await copyText(download_url);
    }, { done: "Download link copied (it expires)" });
  const remove = async (p: Package) => {
    if (
      await run(() => api.delete("/api/v1/packages/:id", { id: p.id }), {
        confirm: [`Delete package #${p.id} (${String(meta(p, "software.version"))})?`, { body: "The file is removed from storage. A package still assigned to a group cannot be deleted.", confirm: "Delete package" }],
        done: "Package deleted",
      })
    )
      packages.reload();
  };

  return (
    <>
      <PageHeader title="Packages" sub="Images and files devices install. A group's policy picks among them by version and device type." />
      <UploadCard prefix={prefix} onUploaded={packages.reload} />
      <Show loaded={packages}>
        {(list) => (
          <Table
            rows={[...list].reverse()}
            rowKey={(p) => p.id}
            rowAttrs={(p) => ({ "data-package": p.id })}
            empty="No packages yet: upload one above."
            columns={[
              {
                head: "Version",
                sort: (p) => String(meta(p, "software.version") ?? ""),
                cell: (p) => (
                  <>
                    <a class="mono strong" href={href(`/packages/${p.id}`)}>
                      {String(meta(p, "software.version") ?? "–")}
                    </a>
                    <div class="muted small">#{p.id}</div>
                  </>
                ),
              },
              { head: "Device type", sort: (p) => String(meta(p, "hardware.devtype") ?? ""), cell: (p) => String(meta(p, "hardware.devtype") ?? "–") },
              { head: "Size", class: "nowrap", headClass: "", sort: (p) => size(p), cell: (p) => formatBytes(size(p)) },
              { head: "Signature", class: "nowrap", sort: (p) => String(meta(p, "signature.status") ?? ""), cell: (p) => <SignatureBadge pkg={p} prefix={prefix} /> },
              {
                head: "SHA-256",
                class: "hide-narrow",
                cell: (p) => (
                  <span class="mono small" title={p.sha256}>
                    {p.sha256.slice(0, 16)}…
                  </span>
                ),
              },
              { head: "Uploaded", class: "hide-narrow", sort: (p) => timeOf(p.created), cell: (p) => <Time value={p.created} /> },
              {
                head: "",
                class: "actions",
                cell: (p) => (
                  <>
                    <button type="button" class="small" disabled={busy} onClick={() => copyLink(p)}>
                      Copy link
                    </button>{" "}
                    <button type="button" class="small danger" disabled={busy} onClick={() => remove(p)}>
                      Delete
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

function UploadCard(props: { prefix: string; onUploaded: () => void }) {
  const form = useRef<HTMLFormElement>(null);
  const [progress, setProgress] = useState<number>();
  const [error, setError] = useState<string>();
  const abort = useRef<(() => void) | undefined>(undefined);
  const [uploading, setUploading] = useState(false);
  const submit = async (e: Event) => {
    e.preventDefault();
    const data = new FormData(form.current!);
    const body = new FormData();
    // Metadata first, the file last: the server reads the fields before it streams the file.
    body.set(`${props.prefix}.software.version`, String(data.get("version")).trim());
    body.set(`${props.prefix}.hardware.devtype`, String(data.get("devtype")).trim());
    for (const line of String(data.get("extra") ?? "").split("\n")) {
      const at = line.indexOf("=");
      if (at > 0) body.set(line.slice(0, at).trim(), line.slice(at + 1).trim());
    }
    body.set("file", data.get("file") as File);
    setError(undefined);
    setProgress(0);
    setUploading(true);
    const job = upload("/api/v1/packages", body, setProgress);
    abort.current = job.abort;
    try {
      const pkg = await job.done;
      setProgress(1);
      notify(`Package #${pkg.id} uploaded`);
      form.current!.reset();
      props.onUploaded();
    } catch (err) {
      setError(messageOf(err));
    } finally {
      abort.current = undefined;
      setUploading(false);
      setTimeout(() => setProgress(undefined), 1500);
    }
  };
  return (
    <Card title="Upload a package">
      <form ref={form} onSubmit={submit}>
        <div class="form-row">
          <Field label="File" wide>
            <input type="file" name="file" required />
          </Field>
          <Field label="Version">
            <input name="version" required placeholder="v2" style={{ width: "140px" }} />
          </Field>
          <Field label="Device type">
            <input name="devtype" required placeholder="generic" style={{ width: "160px" }} />
          </Field>
        </div>
        <details style={{ margin: "10px 0" }}>
          <summary class="small">More metadata</summary>
          <Field label="key=value, one a line" hint={`Stored with the package. Keys under ${props.prefix}.storage. are reserved.`}>
            <textarea name="extra" rows={3} />
          </Field>
        </details>
        <div class="row">
          <button type="submit" class="primary" disabled={uploading}>
            {uploading ? "Uploading…" : "Upload"}
          </button>
          {uploading && (
            <button type="button" onClick={() => abort.current?.()}>
              Cancel
            </button>
          )}
          {progress !== undefined && <ProgressBar value={progress * 100} label="upload progress" />}
        </div>
        {error && (
          <p class="form-error" role="alert" style={{ marginTop: "8px" }}>
            {error}
          </p>
        )}
      </form>
    </Card>
  );
}

export const packagesPage: Page = { path: "/packages", title: "Packages", component: Packages, nav: { section: "Update server", label: "Packages", order: 40 } };
