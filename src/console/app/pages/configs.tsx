import { useRef, useState } from "preact/hooks";
import { api, ApiError, call, messageOf, seg, upload } from "../api.ts";
import { href, type Page, type PageProps } from "../router.ts";
import { canReadTests, canRunTests, hintLines, includesOf, YamlView } from "../testruns.tsx";
import type { ConfigProblem, DeviceTestHistory, TestConfig } from "../../../testrun/schema.ts";
import { Card, formatBytes, notify, PageHeader, Show, Table, Time, timeOf, useAction, useLoad } from "../ui.tsx";

/** What uploading one file did: stored here, then copied to nodes (each node's result). */
interface UploadResult {
  file: string;
  error?: string;
  line?: number;
  /** The file's text, to show the lines around a problem. */
  text?: string;
  nodes: Array<{ node: string; error: string }>;
}

function Configs({ me }: PageProps) {
  const configs = useLoad(() => api.get("/api/v1/configs", { details: "true" }));
  const [busy, run] = useAction();
  const write = canRunTests(me);

  const remove = async (c: TestConfig) => {
    if (
      await run(() => api.delete("/api/v1/configs/:name", { name: c.name }), {
        confirm: [`Delete ${c.name}?`, { body: "Runs already started keep their copy. Configs that include it stop loading.", confirm: "Delete config" }],
        done: `${c.name} deleted`,
      })
    )
      configs.reload();
  };

  return (
    <>
      <PageHeader title="Test configs" sub="YAML files that say what a test run does: groups of test entries, suites, includes and overridable keys." />
      {write && <UploadCard onUploaded={configs.reload} />}
      <Show loaded={configs}>
        {(list) => (
          <Table
            rows={list}
            rowKey={(c) => c.name}
            rowAttrs={(c) => ({ "data-config": c.name })}
            empty={`No configs yet${write ? ": upload one above (assets/testrun/samples has one for every module)." : "."}`}
            columns={[
              {
                head: "Name",
                sort: (c) => c.name,
                cell: (c) => (
                  <a class="mono strong" href={href(`/configs/${seg(c.name)}`)}>
                    {c.name}
                  </a>
                ),
              },
              { head: "Uploaded", sort: (c) => timeOf(c.created), cell: (c) => <Time value={c.created} /> },
              { head: "Size", sort: (c) => c.size, cell: (c) => formatBytes(c.size) },
              {
                head: "",
                class: "actions",
                cell: (c) => (
                  <>
                    {write && (
                      <a class="button small primary" href={href("/runs", { trigger: c.name })}>
                        Run…
                      </a>
                    )}{" "}
                    <a class="button small" href={`/api/v1/configs/${seg(c.name)}/file`} download={c.name}>
                      Download
                    </a>{" "}
                    {write && (
                      <button type="button" class="small danger" disabled={busy} onClick={() => remove(c)}>
                        Delete
                      </button>
                    )}
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

/** Upload one or several files, here and optionally to lab nodes; problems are shown per file with their line. */
function UploadCard(props: { onUploaded: () => void }) {
  const nodes = useLoad(() => api.get("/api/v1/test-nodes"));
  const input = useRef<HTMLInputElement>(null);
  const [targets, setTargets] = useState<Set<string>>(new Set());
  const [results, setResults] = useState<UploadResult[]>([]);
  const [uploading, setUploading] = useState(false);

  const toggle = (name: string) => {
    const next = new Set(targets);
    if (next.has(name)) next.delete(name);
    else next.add(name);
    setTargets(next);
  };

  const submit = async (e: Event) => {
    e.preventDefault();
    const files = [...(input.current?.files ?? [])];
    if (files.length === 0) return;
    setUploading(true);
    const out: UploadResult[] = [];
    for (const file of files) {
      const result: UploadResult = { file: file.name, nodes: [] };
      out.push(result);
      const form = new FormData();
      form.set("file", file);
      try {
        await upload("/api/v1/configs", form, () => {}).done;
      } catch (error) {
        result.error = messageOf(error);
        result.line = error instanceof ApiError ? lineOf(result.error) : undefined;
        result.text = await file.text().catch(() => undefined);
        continue;
      }
      if (targets.size > 0) {
        try {
          const pushed = await api.post("/api/v1/configs/:name/push", { name: file.name }, { nodes: [...targets] });
          result.nodes = pushed.map((p) => ({ node: p.node, error: p.error }));
        } catch (error) {
          result.nodes = [...targets].map((node) => ({ node, error: messageOf(error) }));
        }
      }
    }
    setResults(out);
    setUploading(false);
    const ok = out.filter((r) => !r.error).length;
    if (ok > 0) {
      notify(`${ok} config${ok === 1 ? "" : "s"} uploaded`);
      props.onUploaded();
    }
    if (out.every((r) => !r.error)) input.current!.value = "";
  };

  return (
    <Card title="Upload configs">
      <form onSubmit={submit}>
        <div class="form-row">
          <label class="field wide">
            <span class="field-label">YAML files (.yml, .yaml; several at once)</span>
            <input ref={input} type="file" name="configs" accept=".yml,.yaml" multiple required />
          </label>
          <button type="submit" class="primary" disabled={uploading}>
            {uploading ? "Uploading…" : "Upload"}
          </button>
        </div>
        <Show loaded={nodes}>
          {(list) =>
            list.length === 0 ? null : (
              <fieldset class="plain">
                <legend class="field-label">Also copy to lab nodes (with the files it includes)</legend>
                <div class="checks">
                  {list.map((n) => (
                    <label key={n.name}>
                      <input type="checkbox" name="node" value={n.name} checked={targets.has(n.name)} onChange={() => toggle(n.name)} />
                      {n.name} <span class="muted small">{n.url}</span>
                    </label>
                  ))}
                </div>
              </fieldset>
            )
          }
        </Show>
      </form>
      {results.length > 0 && (
        <ul class="upload-results" aria-label="Upload results">
          {results.map((r) => (
            <li key={r.file} data-upload={r.file}>
              {r.error ? (
                <div class="upload-problem" role="alert">
                  <strong class="mono">{r.file}</strong>: not stored. {r.error}
                  {r.text !== undefined && r.line !== undefined && <Snippet text={r.text} line={r.line} />}
                </div>
              ) : (
                <div>
                  <span class="ok-mark">✓</span> <a class="mono" href={href(`/configs/${seg(r.file)}`)}>{r.file}</a> stored on this gateway
                  {r.nodes.map((n) => (
                    <div key={n.node} class={n.error ? "form-error small" : "small"}>
                      {n.error ? `✗ ${n.node}: ${n.error}` : `✓ copied to ${n.node}`}
                    </div>
                  ))}
                </div>
              )}
            </li>
          ))}
        </ul>
      )}
    </Card>
  );
}

/** The line number an upload error names ("... (line 3)"). */
const lineOf = (message: string): number | undefined => {
  const n = /\(line (\d+)\)/.exec(message)?.[1];
  return n === undefined ? undefined : Number(n);
};

/** Three lines either side of `line`, that line marked. */
function Snippet(props: { text: string; line: number }) {
  const lines = props.text.split("\n");
  const from = Math.max(1, props.line - 3);
  const part = lines.slice(from - 1, props.line + 3);
  return (
    <div class="snippet">
      {part.map((l, i) => (
        <div key={i} class={from + i === props.line ? "y-line y-mark" : "y-line"}>
          <span class="y-no">{from + i}</span>
          <span class="y-text">{l}</span>
        </div>
      ))}
    </div>
  );
}

/** One config: its YAML highlighted, its suites, includes and the keys overrides may set. */
function ConfigView({ params, query, me }: PageProps) {
  const name = params.name!;
  const text = useLoad(async () => (await call("GET", `/api/v1/configs/${seg(name)}/file`)).text(), [name]);
  const outline = useLoad(async (): Promise<{ problem: ConfigProblem } | { suites: string[]; hints: string[] }> => {
    // Both read the config with its includes: one problem answers both the same way.
    const res = await fetch(`/api/v1/configs/${seg(name)}/test-suites`, { credentials: "same-origin" });
    if (res.status === 422) return { problem: (await res.json()) as ConfigProblem };
    if (!res.ok) throw new ApiError(res.status, ((await res.json().catch(() => ({}))) as { error?: string }).error ?? res.statusText);
    const suites = (await res.json()) as string[];
    const hints = await api.get("/api/v1/configs/:name/override-hints", { name });
    return { suites, hints };
  }, [name]);
  const problem = outline.data && "problem" in outline.data ? outline.data.problem : undefined;
  const here = problem?.file === name ? problem.line : undefined;
  const wanted = Number(query.get("line")) || undefined;
  const includes = text.data ? includesOf(text.data) : [];
  return (
    <>
      <PageHeader title={<span class="mono">{name}</span>} sub={<a href={href("/configs")}>‹ All configs</a>}>
        {canRunTests(me) && (
          <a class="button primary" href={href("/runs", { trigger: name })}>
            Run…
          </a>
        )}
        <a class="button" href={`/api/v1/configs/${seg(name)}/file`} download={name}>
          Download
        </a>
      </PageHeader>
      {problem && (
        <div class="error-box" role="alert" data-problem>
          <span>
            <strong>This config does not load:</strong> {problem.error.replace(/^Failed to parse file: /, "")}
            {problem.file && problem.file !== name && (
              <>
                {" "}
                (<a href={href(`/configs/${seg(problem.file)}`, { line: problem.line })}>{problem.file}{problem.line ? ` line ${problem.line}` : ""}</a>)
              </>
            )}
          </span>
        </div>
      )}
      <div class="config-layout">
        <Card title="YAML">
          <Show loaded={text}>
            {(yaml) => <YamlView text={yaml} mark={here ?? wanted} marks={outline.data && "hints" in outline.data ? hintLines(yaml, outline.data.hints) : undefined} />}
          </Show>
        </Card>
        <div>
          <Card title="Test suites">
            {outline.data && "suites" in outline.data ? (
              outline.data.suites.length === 0 ? (
                <p class="muted">None: a run takes every group (or one group by name).</p>
              ) : (
                <ul class="plain-list">
                  {outline.data.suites.map((s) => (
                    <li key={s} class="mono">
                      {s}
                    </li>
                  ))}
                </ul>
              )
            ) : (
              <p class="muted">{problem ? "Unknown until the config loads." : "Loading…"}</p>
            )}
          </Card>
          <Card title="Includes">
            {includes.length === 0 ? (
              <p class="muted">None.</p>
            ) : (
              <ul class="plain-list">
                {includes.map((i) => (
                  <li key={i.name}>
                    <a class="mono" href={href(`/configs/${seg(i.name)}`)}>
                      {i.name}
                    </a>
                    <span class="muted small">line {i.line}</span>
                  </li>
                ))}
              </ul>
            )}
          </Card>
          <Card title="Override hints">
            {outline.data && "hints" in outline.data ? (
              outline.data.hints.length === 0 ? (
                <p class="muted">None declared (an override may still set any key by its dotted path).</p>
              ) : (
                <>
                  <p class="muted small">Keys a run may override in the trigger dialog (tinted in the YAML):</p>
                  <ul class="plain-list">
                    {outline.data.hints.map((h) => (
                      <li key={h} class="mono small">
                        {h}
                      </li>
                    ))}
                  </ul>
                </>
              )
            ) : (
              <p class="muted">{problem ? "Unknown until the config loads." : "Loading…"}</p>
            )}
          </Card>
        </div>
      </div>
      <DeviceHistory name={name} />
    </>
  );
}

const HISTORY_RUNS = 10;
const HISTORY_ROWS = 1000;

/** A history row's test: the entry's name where it has one, over its report name. */
function HistoryTest(props: { test: string; name: string | undefined }) {
  if (!props.name) return <span class="mono small">{props.test}</span>;
  return (
    <span class="check">
      <strong class="check-name">{props.name}</strong>
      <span class="mono small muted">{props.test}</span>
    </span>
  );
}

/**
 * The config's newest runs on managed devices as a matrix: a row per test, a column per device,
 * in each cell the test's result in each run (oldest left, newest right). Newly failing and
 * flaky tests are marked and can be shown alone. Not shown for a config never run on devices.
 */
function DeviceHistory(props: { name: string }) {
  const history = useLoad(async () => {
    const res = await call("GET", `/api/v1/configs/${seg(props.name)}/history?runs=${HISTORY_RUNS}&limit=${HISTORY_ROWS}`);
    const items = (await res.json()) as DeviceTestHistory;
    return { items, total: Number(res.headers.get("x-total-count") ?? items.rows.length) };
  }, [props.name]);
  const [only, setOnly] = useState(false);
  if (!history.data || history.data.items.runs.length === 0) return null;
  const { items, total } = history.data;
  const devices = [...new Set(items.rows.map((r) => r.device))].sort();
  const tests = new Map<string, Map<string, DeviceTestHistory["rows"][number]>>();
  for (const row of items.rows) {
    if (!tests.has(row.test_name)) tests.set(row.test_name, new Map());
    tests.get(row.test_name)!.set(row.device, row);
  }
  const troubled = (cells: Map<string, DeviceTestHistory["rows"][number]>) => [...cells.values()].some((c) => c.flaky || c.newly_failing || c.results[0] === "failed");
  const shown = [...tests].filter(([, cells]) => !only || troubled(cells)).sort(([a], [b]) => (a < b ? -1 : 1));
  const runs = [...items.runs].reverse();
  return (
    <Card
      title="On devices: the newest runs"
      actions={
        <label class="small">
          <input type="checkbox" checked={only} onChange={() => setOnly(!only)} /> only failing or flaky tests
        </label>
      }
    >
      <p class="muted small">
        Each cell shows a test's result on a device in the last {runs.length} run{runs.length === 1 ? "" : "s"} on devices, oldest left, newest right.{" "}
        <span class="history-legend newly-failing">newly failing</span> <span class="history-legend flaky">flaky</span>
        {total > items.rows.length && ` The first ${items.rows.length} of ${total} (device, test) pairs.`}
      </p>
      <div class="history-scroll">
        <table class="table history" aria-label="Results per device">
          <thead>
            <tr>
              <th>Test</th>
              {devices.map((d) => (
                <th key={d} class="mono small">
                  {d}
                </th>
              ))}
            </tr>
          </thead>
          <tbody>
            {shown.length === 0 && (
              <tr>
                <td colSpan={devices.length + 1} class="muted">
                  No failing or flaky test.
                </td>
              </tr>
            )}
            {shown.map(([test, cells]) => (
              <tr key={test} data-test={test}>
                <td>
                  <HistoryTest test={test} name={[...cells.values()].find((c) => c.name)?.name} />
                </td>
                {devices.map((d) => {
                  const cell = cells.get(d);
                  if (!cell) return <td key={d} class="muted small">–</td>;
                  return (
                    <td key={d} data-device={d} class={cell.newly_failing ? "newly-failing" : cell.flaky ? "flaky" : undefined} title={cell.newly_failing ? "newly failing" : cell.flaky ? "flaky" : undefined}>
                      <span class="strip">
                        {[...cell.results].reverse().map((result, i) => (
                          <a key={runs[i]!.id} href={href(`/runs/${seg(runs[i]!.id)}`)} class={`cell-result result-${result ?? "none"}`} title={`${runs[i]!.created_at}: ${result ?? "not run"}`} aria-label={`${result ?? "not run"} in run ${runs[i]!.id.slice(0, 8)}`} />
                        ))}
                      </span>
                    </td>
                  );
                })}
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </Card>
  );
}

export const configsPage: Page = {
  path: "/configs",
  title: "Test configs",
  component: Configs,
  nav: { section: "Test runs", label: "Configs", order: 10 },
  visible: canReadTests,
};
export const configPage: Page = { path: "/configs/:name", title: "Test config", component: ConfigView, visible: canReadTests };
