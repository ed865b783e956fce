import { Fragment } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import { api, call } from "../api.ts";
import { isOnline, useLive } from "../live.ts";
import { href, navigate, type Page, type PageProps } from "../router.ts";
import { canAdminWrite, isAdmin, prefixOf } from "../session.ts";
import type { Device } from "../../../update/devices/schema.ts";
import type { Action, ActionLogEntry } from "../../../update/actions/schema.ts";
import { groupName } from "../update.ts";
import { UpdateHistory } from "../rollouts.tsx";
import { RecentAudit } from "../audit.tsx";
import { Badge, Card, confirmAction, ErrorBox, OnlineBadge, PageHeader, ProgressBar, Show, Table, Time, useAction, useLoad } from "../ui.tsx";

/** Base64 output of an action as text. */
const decodeOutput = (b64: string | null | undefined): string => {
  if (!b64) return "";
  try {
    return new TextDecoder().decode(Uint8Array.from(atob(b64), (c) => c.charCodeAt(0)));
  } catch {
    return b64;
  }
};

const statusTone = (e: ActionLogEntry) => (e.status === "pending" || e.status === "sent" ? "info" : e.status_code === 0 || e.status === "success" ? "ok" : "bad");

/** The protocols a device may speak (`<prefix>.device.protocol`, set by the server), as a person reads them. */
const PROTOCOLS: Record<string, string> = { labgate: "labgate's agent", mender: "Mender's client", ddi: "hawkBit DDI (SWUpdate or RAUC)" };

function DevicePage({ params, me }: PageProps) {
  const id = params.id!;
  const live = useLive();
  const device = useLoad(() => api.get("/api/v2/devices/:id{[0-9]+}", { id }), [id, live.opened]);
  const [busy, run] = useAction();
  const prefix = prefixOf(me);

  const remove = async (d: Device) => {
    if (await run(() => api.delete("/api/v2/devices/:id{[0-9]+}", { id: d.id }), { confirm: [`Delete device ${d.name}?`, { body: "Its tags, group memberships and progress go with it; if its agent asks again it appears under Registrations.", confirm: "Delete device" }], done: "Device deleted" })) navigate("/devices");
  };
  const rename = async (d: Device) => {
    const name = window.prompt("New name for the device", d.name);
    if (name === null || name.trim() === "" || name === d.name) return;
    if (await run(() => api.patch("/api/v2/devices/:id{[0-9]+}", { id: d.id }, { name: name.trim() }), { done: "Renamed" })) device.reload();
  };

  return (
    <Show loaded={device}>
      {(d) => {
        const online = isOnline(live, d.mac_address, d.connected);
        const progress = live.progress.get(d.mac_address);
        const caps = d.capabilities ?? {};
        const protocol = String(d.metadata[`${prefix}.device.protocol`] ?? "labgate");
        return (
          <>
            <PageHeader
              title={
                <>
                  {d.name || d.mac_address} <OnlineBadge online={online} />
                </>
              }
              sub={
                <>
                  <a href={href("/devices")}>Devices</a> / <span class="mono">{d.mac_address}</span> · id {d.id}
                </>
              }
            >
              <button type="button" onClick={() => rename(d)} disabled={busy}>
                Rename
              </button>
              {canAdminWrite(me) && (
                <button type="button" class="danger" onClick={() => remove(d)} disabled={busy}>
                  Delete
                </button>
              )}
            </PageHeader>
            {progress && (
              <Card title={progress.progress >= 100 ? `Update to ${progress.version} installed` : `Updating to ${progress.version}`}>
                <ProgressBar value={progress.progress} label="update progress" />
              </Card>
            )}
            <div class="grid2">
              <div>
                <Card title="Details">
                  <dl class="props">
                    <dt>Version</dt>
                    <dd class="mono">{String(d.metadata[`${prefix}.software.version`] ?? "–")}</dd>
                    <dt>Protocol</dt>
                    <dd>{PROTOCOLS[protocol] ?? protocol}</dd>
                    <dt>Device type</dt>
                    <dd>{String(d.metadata[`${prefix}.hardware.devtype`] ?? "–")}</dd>
                    <dt>Last access</dt>
                    <dd>
                      <Time value={d.last_access} />
                    </dd>
                    <dt>Groups</dt>
                    <dd>
                      <DeviceGroups ids={d.groups} />
                    </dd>
                    <dt>Capabilities</dt>
                    <dd>
                      {Object.entries(caps).length === 0 ? (
                        <span class="muted">none reported</span>
                      ) : (
                        Object.entries(caps).map(([k, v]) => (
                          <Badge key={k} tone={v ? "ok" : "muted"}>
                            {k}
                            {v === true || v === false ? "" : `: ${String(v)}`}
                          </Badge>
                        ))
                      )}
                    </dd>
                  </dl>
                </Card>
                <Tags deviceId={d.id} />
                <UpdateHistory deviceId={d.id} mac={d.mac_address} />
                {isAdmin(me) && <RecentAudit deviceId={d.id} />}
                <Card title="Metadata">
                  <dl class="props">
                    {Object.entries(d.metadata).map(([k, v]) => (
                      <Fragment key={k}>
                        <dt class="mono small">{k}</dt>
                        <dd class="mono small">{typeof v === "string" ? v : JSON.stringify(v)}</dd>
                      </Fragment>
                    ))}
                  </dl>
                </Card>
              </div>
              <div>
                <ReservationCard deviceId={d.id} me={me} />
                <PowerCard deviceId={d.id} />
                {protocol === "labgate" ? (
                  <>
                    <Actions mac={d.mac_address} online={online} />
                    <FileDownload deviceId={d.id} online={online} />
                    {Boolean(caps.shell_connect ?? caps.shell) && <TerminalCard mac={d.mac_address} online={online} />}
                  </>
                ) : (
                  <Card title="Actions, shell and file download">
                    <p class="muted">Not available: this device runs {PROTOCOLS[protocol] ?? protocol}, which has no remote actions, shell or file access.</p>
                  </Card>
                )}
              </div>
            </div>
          </>
        );
      }}
    </Show>
  );
}

function DeviceGroups(props: { ids: number[] }) {
  const groups = useLoad(() => api.get("/api/v2/groups"));
  if (props.ids.length === 0) return <span class="muted">none</span>;
  return (
    <>
      {props.ids.map((g) => {
        const group = groups.data?.find((x) => x.id === g);
        return (
          <a key={g} href={href(`/groups/${g}`)}>
            <Badge tone="info">{group ? groupName(group) : `#${g}`}</Badge>
          </a>
        );
      })}
    </>
  );
}

function Tags(props: { deviceId: number }) {
  const tags = useLoad(() => api.get("/api/v2/devices/:id{[0-9]+}/tags", { id: props.deviceId }), [props.deviceId]);
  const [busy, run] = useAction();
  const [text, setText] = useState("");
  const add = async (e: Event) => {
    e.preventDefault();
    const tag = text.trim();
    if (!tag) return;
    if (await run(() => api.post("/api/v2/devices/:id{[0-9]+}/tag/:tag", { id: props.deviceId, tag }), { done: `Tagged ${tag}` })) {
      setText("");
      tags.reload();
    }
  };
  const remove = async (tag: string) => {
    if (await run(() => api.delete("/api/v2/devices/:id{[0-9]+}/tag/:tag", { id: props.deviceId, tag }), { confirm: [`Remove the tag ${tag}?`, { confirm: "Remove tag" }] })) tags.reload();
  };
  return (
    <Card title="Tags">
      <Show loaded={tags}>
        {(list) => (
          <p>
            {list.length === 0 && <span class="muted">No tags. </span>}
            {list.map((t) => (
              <Badge key={t}>
                {t}
                <button type="button" aria-label={`Remove tag ${t}`} onClick={() => remove(t)} disabled={busy}>
                  ×
                </button>
              </Badge>
            ))}
          </p>
        )}
      </Show>
      <form class="form-row" onSubmit={add}>
        <input aria-label="New tag" placeholder="new tag" value={text} onInput={(e) => setText(e.currentTarget.value)} />
        <button type="submit" disabled={busy || !text.trim()}>
          Add tag
        </button>
      </form>
    </Card>
  );
}

/** Who holds the device and until when; the caller reserves it for an hour, refreshes or releases their own, an administrator breaks another's. */
function ReservationCard(props: { deviceId: number; me: PageProps["me"] }) {
  const path = "/api/v2/devices/:id{[0-9]+}/reservation";
  const id = props.deviceId;
  const reservation = useLoad(() => api.get(path, { id }), [props.deviceId]);
  const [busy, run] = useAction();
  const r = reservation.data;
  if (!r) return null;
  const mine = r.holder === props.me.sub;
  const reserve = async () => {
    if (await run(() => api.post(path, { id }, { minutes: 60, note: "" }), { done: mine ? "Reservation refreshed" : "Reserved for an hour" })) reservation.reload();
  };
  const release = async () => {
    const confirm: Parameters<typeof confirmAction> | undefined = mine ? undefined : [`Break ${r.holder}'s reservation?`, { confirm: "Break reservation" }];
    if (await run(() => api.delete(path, { id }), { confirm, done: mine ? "Released" : "Reservation broken" })) reservation.reload();
  };
  return (
    <Card title="Reservation">
      {r.reserved ? (
        <p>
          Reserved by <strong>{r.holder}</strong> until <Time value={r.until} />
          {r.note && <span class="muted"> · {r.note}</span>}
        </p>
      ) : (
        <p class="muted">Not reserved: anyone with the test permission may run tests on it.</p>
      )}
      <p>
        {(!r.reserved || mine) && (
          <button type="button" class="small" disabled={busy} onClick={reserve}>
            {mine ? "Refresh (1 hour)" : "Reserve for 1 hour"}
          </button>
        )}{" "}
        {r.reserved && (mine || canAdminWrite(props.me)) && (
          <button type="button" class={`small${mine ? "" : " danger"}`} disabled={busy} onClick={release}>
            {mine ? "Release" : "Break reservation"}
          </button>
        )}
      </p>
    </Card>
  );
}

/** A line typed to the board's console over its live WebSocket (the session cookie authenticates it; `shell` on the device). */
function ConsoleInput(props: { deviceId: number }) {
  const [line, setLine] = useState("");
  const [problem, setProblem] = useState("");
  const socket = useRef<WebSocket | null>(null);
  useEffect(() => () => socket.current?.close(), [props.deviceId]);
  const send = (text: string) => {
    let ws = socket.current;
    if (!ws || ws.readyState > WebSocket.OPEN) {
      const scheme = window.location.protocol === "https:" ? "wss" : "ws";
      ws = socket.current = new WebSocket(`${scheme}://${window.location.host}/api/v2/devices/${props.deviceId}/console/ws`);
      ws.onclose = (e) => e.code >= 4000 && setProblem(e.reason);
    }
    const open = ws;
    if (open.readyState === WebSocket.OPEN) open.send(text);
    else open.addEventListener("open", () => open.send(text), { once: true });
  };
  return (
    <form
      class="row"
      onSubmit={(e) => {
        e.preventDefault();
        setProblem("");
        send(`${line}\r`);
        setLine("");
      }}
    >
      <input aria-label="Send to the console" class="mono" maxLength={4000} value={line} onInput={(e) => setLine((e.currentTarget as HTMLInputElement).value)} placeholder="a line for the board (Enter sends it)" />
      <button type="submit" class="small">Send</button>
      {problem && <span class="error small">{problem}</span>}
    </form>
  );
}

/** The console capture of a board: the kept tail, then what arrives, asked every two seconds; a line may be sent with `shell`. */
function ConsoleCard(props: { deviceId: number; writable?: boolean }) {
  const [text, setText] = useState("");
  const [status, setStatus] = useState("");
  const box = useRef<HTMLPreElement>(null);
  useEffect(() => {
    let since = 0;
    let live = true;
    const poll = async () => {
      const res = await call("GET", `/api/v2/devices/${props.deviceId}/console?since=${since}`).catch(() => undefined);
      if (!live || !res?.ok) return;
      const chunk = await res.text();
      since = Number(res.headers.get("X-Console-End")) || since;
      setStatus(res.headers.get("X-Console-Status") ?? "");
      // The view keeps the last 64 KiB, as a terminal's scrollback.
      if (chunk) setText((old) => (old + chunk).slice(-65536));
    };
    void poll();
    const timer = setInterval(poll, 2000);
    return () => {
      live = false;
      clearInterval(timer);
    };
  }, [props.deviceId]);
  useEffect(() => {
    if (box.current) box.current.scrollTop = box.current.scrollHeight;
  }, [text]);
  return (
    <Card title="Console">
      <p class="muted small">{status === "connected" ? "Captured from the board's console port." : `Console port: ${status || "…"}`}</p>
      <pre class="output" ref={box} aria-label="Board console">
        {text}
      </pre>
      {props.writable && <ConsoleInput deviceId={props.deviceId} />}
    </Card>
  );
}

/** A board's power port (lab.boards): its last known state, and on/off/cycle for callers with `power`. Not a board: no card. */
function PowerCard(props: { deviceId: number }) {
  const power = useLoad(() => api.get("/api/v2/devices/:id{[0-9]+}/power", { id: props.deviceId }), [props.deviceId]);
  const [busy, run] = useAction();
  if (power.data?.console && power.data.driver === null) return <ConsoleCard deviceId={props.deviceId} writable={power.data.console_write} />;
  if ((!power.data || power.data.driver === null) && !power.error) return null;
  const act = async (action: "on" | "off" | "cycle") => {
    // Switching a board off or cycling it ends whatever runs on it: asked first.
    const confirm: Parameters<typeof confirmAction> | undefined = action === "on" ? undefined : [`Power ${action} this board?`, { confirm: action === "off" ? "Power off" : "Power cycle" }];
    if (await run(() => api.post("/api/v2/devices/:id{[0-9]+}/power/:action{on|off|cycle}", { id: props.deviceId, action }), { confirm, done: `Power ${action} done` })) power.reload();
  };
  const p = power.data;
  return (
    <>
    <Card title="Power">
      {power.error || !p ? (
        <ErrorBox error={power.error ?? ""} retry={power.reload} />
      ) : (
        <>
          <p>
            <Badge tone={p.state === "on" ? "ok" : p.state === "off" ? "muted" : "info"}>{p.state}</Badge> <span class="muted">via {p.driver}</span>
            {p.last_action && (
              <span class="muted">
                {" "}
                · last {p.last_action.action} by {p.last_action.by} <Time value={p.last_action.at} />
              </span>
            )}
          </p>
          {p.may_switch && (
            <p>
              <button type="button" class="small" disabled={busy || p.busy} onClick={() => act("on")}>
                Power on
              </button>{" "}
              <button type="button" class="small" disabled={busy || p.busy} onClick={() => act("off")}>
                Power off
              </button>{" "}
              <button type="button" class="small primary" disabled={busy || p.busy} onClick={() => act("cycle")}>
                Power cycle
              </button>
            </p>
          )}
        </>
      )}
    </Card>
    {p?.console && <ConsoleCard deviceId={props.deviceId} writable={p.console_write} />}
    </>
  );
}

function Actions(props: { mac: string; online: boolean }) {
  const mac = props.mac;
  const list = useLoad(() => (props.online ? api.get("/api/v2/devices/:mac/action/list", { mac }) : Promise.resolve(undefined)), [props.mac, props.online]);
  const log = useLoad(() => api.get("/api/v2/devices/:mac/action/log", { mac }), [props.mac]);
  const [running, setRunning] = useState<string>();
  const [result, setResult] = useState<{ action: string; code?: number; output: string; queued?: boolean }>();
  const [busy, run] = useAction();

  const exec = async (a: Action) => {
    setRunning(a.action_id);
    setResult(undefined);
    await run(async () => {
      // 202 {} when the device is offline: queued.
      const res = await api.get("/api/v2/devices/:mac/action/exec/:action_id", { mac, action_id: a.action_id });
      setResult(res?.status_code === undefined ? { action: a.action_name || a.action_id, output: "", queued: true } : { action: a.action_name || a.action_id, code: res.status_code, output: decodeOutput(res.output) });
    });
    setRunning(undefined);
    log.reload();
  };
  const clear = async () => {
    if (await run(() => api.delete("/api/v2/devices/:mac/action/log", { mac }), { confirm: ["Clear the finished entries of the action log?", { confirm: "Clear" }], done: "Log cleared" })) log.reload();
  };

  return (
    <>
      <Card title="Actions">
        {!props.online ? (
          <p class="muted">The device is offline: its actions are listed when it is connected.</p>
        ) : list.error ? (
          <ErrorBox error={list.error} retry={list.reload} />
        ) : (
          <Table
            rows={list.data}
            loading="Asking the device…"
            empty="The device offers no actions."
            headless
            rowKey={(a) => a.action_id}
            columns={[
              {
                head: "Action",
                cell: (a) => (
                  <>
                    <div class="strong">{a.action_name || a.action_id}</div>
                    <div class="muted small">{a.description || <span class="mono">{a.command.join(" ") || a.action_id}</span>}</div>
                  </>
                ),
              },
              {
                head: "",
                class: "actions",
                cell: (a) => (
                  <button type="button" class="small" disabled={busy} onClick={() => exec(a)} aria-label={`Run ${a.action_name || a.action_id}`}>
                    {running === a.action_id ? "Running…" : "Run"}
                  </button>
                ),
              },
            ]}
          />
        )}
        {result && (
          <div class="action-result" aria-live="polite">
            <p style={{ marginTop: "10px" }}>
              <strong>{result.action}</strong>{" "}
              {result.queued ? <Badge tone="info">queued: runs when the device connects</Badge> : <Badge tone={result.code === 0 ? "ok" : "bad"}>exit {result.code}</Badge>}
            </p>
            {!result.queued && <pre class="output">{result.output || "(no output)"}</pre>}
          </div>
        )}
      </Card>
      <Card
        title="Action log"
        actions={
          <>
            <button type="button" class="small" onClick={log.reload}>
              Refresh
            </button>
            <button type="button" class="small" onClick={clear} disabled={busy}>
              Clear finished
            </button>
          </>
        }
      >
        <Show loaded={log}>
          {(entries) => (
            <Table
              rows={entries.slice(0, 50)}
              rowKey={(e) => e.id}
              empty="No actions run yet."
              columns={[
                {
                  head: "Action",
                  cell: (e) => (
                    <>
                      <span class="mono">{e.action}</span>
                      {e.output && (
                        <details>
                          <summary class="small muted">output{e.output_truncated ? " (start)" : ""}</summary>
                          <pre class="output">{decodeOutput(e.output)}</pre>
                        </details>
                      )}
                      {e.download_url && (
                        <div>
                          <a class="small" href={e.download_url}>
                            whole output
                          </a>
                        </div>
                      )}
                    </>
                  ),
                },
                { head: "Status", cell: (e) => <Badge tone={statusTone(e)}>{e.status_code === null ? e.status : `exit ${e.status_code}`}</Badge> },
                { head: "When", cell: (e) => <Time value={e.created} /> },
              ]}
            />
          )}
        </Show>
      </Card>
    </>
  );
}

function FileDownload(props: { deviceId: number; online: boolean }) {
  const [path, setPath] = useState("");
  const [link, setLink] = useState<{ file: string; url: string }>();
  const [busy, run] = useAction();
  const fetchFile = async (e: Event) => {
    e.preventDefault();
    setLink(undefined);
    const file = path.trim();
    await run(async () => {
      const res = await api.post("/api/v2/devices/:id{[0-9]+}/fs/file", { id: props.deviceId }, { file });
      if (res.status !== 0 || !res.url) throw new Error(`${file}: not found, empty, not readable or outside the agent's file_base_dir`);
      setLink({ file, url: res.url });
    });
  };
  return (
    <Card title="Download a file from the device">
      <form class="form-row" onSubmit={fetchFile}>
        <input class="wide" style={{ flex: 1 }} aria-label="Absolute path on the device" placeholder="/var/log/syslog" value={path} onInput={(e) => setPath(e.currentTarget.value)} />
        <button type="submit" disabled={busy || !props.online || !path.trim().startsWith("/")}>
          {busy ? "Fetching…" : "Fetch"}
        </button>
      </form>
      <p class="hint">{props.online ? "An absolute path inside the agent's file_base_dir." : "The device must be online."}</p>
      {link && (
        <p>
          <a href={link.url} download={link.file.replace(/^.*\//, "")} class="strong">
            Download {link.file.replace(/^.*\//, "")}
          </a>
        </p>
      )}
    </Card>
  );
}

function TerminalCard(props: { mac: string; online: boolean }) {
  const box = useRef<HTMLDivElement>(null);
  const [state, setState] = useState<"closed" | "loading" | "open">("closed");
  const [ended, setEnded] = useState<string>();
  const session = useRef<{ close(): void } | undefined>(undefined);
  useEffect(() => () => session.current?.close(), []);
  const open = async () => {
    setState("loading");
    setEnded(undefined);
    try {
      const { openTerminal } = await import("../terminal.ts");
      session.current = openTerminal(box.current!, props.mac, (reason) => setEnded(reason));
      setState("open");
    } catch (error) {
      setEnded(`the terminal could not load: ${(error as Error).message}`);
      setState("closed");
    }
  };
  const close = () => {
    session.current?.close();
    session.current = undefined;
    setState("closed");
  };
  return (
    <Card
      title="Terminal"
      actions={
        state === "open" ? (
          <button type="button" class="small" onClick={close}>
            Close terminal
          </button>
        ) : (
          <button type="button" class="small primary" onClick={open} disabled={!props.online || state === "loading"}>
            {state === "loading" ? "Opening…" : "Open terminal"}
          </button>
        )
      }
    >
      {state === "closed" && <p class="hint">{props.online ? "A shell on the device (no PTY: lines are edited here and sent with Enter)." : "The device must be online."}</p>}
      {ended && state === "closed" && <p class="muted">Session ended: {ended}</p>}
      <div ref={box} class="terminal-box" hidden={state === "closed"} />
    </Card>
  );
}

export const devicePage: Page = { path: "/devices/:id", title: "Device", component: DevicePage };
