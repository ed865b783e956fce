import { useEffect, useState } from "preact/hooks";
import { get, getPage, seg } from "../api.ts";
import { isOnline, useLive } from "../live.ts";
import { href, replaceQuery, type Page, type PageProps } from "../router.ts";
import { prefixOf } from "../session.ts";
import type { Device, Group } from "../types.ts";
import { groupName } from "./groups.tsx";
import { Badge, Empty, OnlineBadge, PageHeader, Pager, ProgressBar, Show, Time, useDebounced, useLoad } from "../ui.tsx";

const LIMIT = 50;

function Devices({ query, me }: PageProps) {
  const offset = Math.max(0, Number(query.get("offset")) || 0);
  const [text, setText] = useState(query.get("q") ?? "");
  const q = useDebounced(text.trim(), 250);
  useEffect(() => {
    if (q !== (query.get("q") ?? "")) replaceQuery({ q, offset: undefined });
  }, [q]);
  const page = useLoad(async () => {
    const params = new URLSearchParams({ limit: String(LIMIT), offset: String(offset) });
    if (q) params.set("q", q);
    const { items, total } = await getPage<Device>(`/api/v2/devices?${params}`);
    // Tags are per device: one small request each, for this page only.
    const tags = await Promise.all(items.map((d) => get<string[]>(`/api/v2/devices/${d.id}/tags`).catch(() => [] as string[])));
    return { items, total, tags };
  }, [offset, q]);
  const groups = useLoad(() => get<Group[]>("/api/v2/groups"));
  const nameOfGroup = (id: number) => {
    const group = groups.data?.find((g) => g.id === id);
    return group ? groupName(group) : `#${id}`;
  };
  const live = useLive();
  // An update that reaches 100 % ends with a new version: read the page again shortly after.
  const finished = page.data?.items.filter((d) => (live.progress.get(d.mac_address)?.progress ?? 0) >= 100 && live.progress.get(d.mac_address)?.version !== d.metadata[`${prefixOf(me)}.software.version`]).map((d) => d.id).join(",");
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
      </PageHeader>
      <Show loaded={page}>
        {({ items, total, tags }) =>
          items.length === 0 ? (
            <Empty>{q ? "No device matches the filter." : "No approved devices yet: approve one under Registrations."}</Empty>
          ) : (
            <>
              <div class="table-wrap">
                <table class="table">
                  <thead>
                    <tr>
                      <th>Device</th>
                      <th>Status</th>
                      <th>Version</th>
                      <th class="hide-narrow">Type</th>
                      <th class="hide-narrow">Groups</th>
                      <th class="hide-narrow">Tags</th>
                      <th>Last access</th>
                    </tr>
                  </thead>
                  <tbody>
                    {items.map((d, i) => {
                      const progress = live.progress.get(d.mac_address);
                      return (
                        <tr key={d.id} data-mac={d.mac_address}>
                          <td>
                            <a href={href(`/devices/${seg(d.id)}`)} class="strong">
                              {d.name || d.mac_address}
                            </a>
                            <div class="muted mono small">{d.mac_address}</div>
                          </td>
                          <td>
                            <OnlineBadge online={isOnline(live, d.mac_address, d.connected)} />
                            {progress && (
                              <div class="progress-cell" title={`updating to ${progress.version}`}>
                                <ProgressBar value={progress.progress} label={`update of ${d.name || d.mac_address}`} />
                              </div>
                            )}
                          </td>
                          <td class="mono">{String(d.metadata[`${prefix}.software.version`] ?? "–")}</td>
                          <td class="hide-narrow">{String(d.metadata[`${prefix}.hardware.devtype`] ?? "–")}</td>
                          <td class="hide-narrow">
                            {d.groups.map((g) => (
                              <Badge key={g} tone="info">
                                {nameOfGroup(g)}
                              </Badge>
                            ))}
                          </td>
                          <td class="hide-narrow">
                            {tags[i]!.map((t) => (
                              <Badge key={t}>{t}</Badge>
                            ))}
                          </td>
                          <td>
                            <Time value={d.last_access} />
                          </td>
                        </tr>
                      );
                    })}
                  </tbody>
                </table>
              </div>
              <Pager offset={offset} limit={LIMIT} total={total} onChange={(o) => replaceQuery({ q, offset: o || undefined })} />
            </>
          )
        }
      </Show>
    </>
  );
}

export const devicesPage: Page = { path: "/devices", title: "Devices", component: Devices, nav: { section: "Update server", label: "Devices", order: 10 } };
