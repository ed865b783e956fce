import assert from "node:assert/strict";
import { request as httpRequest } from "node:http";
import { after, describe, test } from "node:test";
import { useTestServer } from "../helpers/server.ts";
import { trigger, uploadConfig, waitRun, serverErrors } from "./run-helpers.ts";

/** A GET with the path sent exactly as written (fetch would normalise `..`). */
function rawGet(base: string, path: string, token: string): Promise<{ status: number; body: string }> {
  const url = new URL(base);
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: url.hostname, port: url.port, path, method: "GET", headers: { authorization: `Bearer ${token}` } }, (res) => {
      let body = "";
      res.on("data", (c) => (body += c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on("error", reject);
    req.end();
  });
}

const MAKER = `
tests:
  g:
  - simple:
      device: a
  - exec:
      command: >-
        mkdir -p sub/dir && printf '{"a":1}' > sub/dir/data.json &&
        printf 'spaced' > 'a b.txt' && printf 'bin' > blob &&
        ln -s /etc/hostname link-out && ln -s file.txt link-in && ln -s /etc linkdir && ln -s ../../.. up
`;

describe("artifacts", () => {
  let errors: string[] = [];
  let id: string;
  const get = (path: string, init: RequestInit = {}) => s.request(`/api/v1/test-runs/${id}/artifacts${path}`, { ...init, token: s.adminToken });

  const s = useTestServer({ test_server: { compat_modules: true } as never }, async (s) => {
    errors = serverErrors(s);
    await uploadConfig(s, "maker.yml", MAKER);
    id = (await trigger(s, { config_name: "maker.yml" })).id;
    await waitRun(s, id);
  });
  after(() => {
    assert.deepEqual(errors, [], "no request was answered 5xx");
  });

  test("recursive listing of regular files, sorted, without symlinks", async () => {
    const res = await get("");
    assert.equal(res.status, 200);
    const list = (await res.json()) as { name: string; created: string }[];
    assert.deepEqual(
      list.map((a) => a.name),
      ["a b.txt", "blob", "file.txt", "sub/dir/data.json"],
    );
    for (const a of list) assert.match(a.created, / \+0000$/);
  });

  test("download with an inferred content type, attachment or inline, HEAD", async () => {
    const file = await get("/file.txt");
    assert.equal(file.status, 200);
    assert.equal(file.headers.get("content-type"), "text/plain; charset=utf-8");
    assert.equal(file.headers.get("content-disposition"), "attachment; filename=file.txt");
    assert.equal(await file.text(), "test");

    const preview = await get("/file.txt?preview=true");
    assert.equal(preview.headers.get("content-disposition"), "inline; filename=file.txt");
    await preview.arrayBuffer();

    const nested = await get("/sub/dir/data.json");
    assert.equal(nested.headers.get("content-type"), "application/json; charset=utf-8");
    assert.equal(nested.headers.get("content-disposition"), "attachment; filename=data.json");
    assert.equal(await nested.text(), '{"a":1}');

    const encoded = await get("/sub%2Fdir%2Fdata.json");
    assert.equal(encoded.status, 200);
    assert.equal(await encoded.text(), '{"a":1}');

    const blob = await get("/blob");
    assert.equal(blob.headers.get("content-type"), "application/octet-stream");
    await blob.arrayBuffer();

    const spaced = await get("/a%20b.txt");
    assert.equal(spaced.status, 200);
    assert.match(spaced.headers.get("content-disposition") ?? "", /^attachment; filename="a b\.txt"/);
    assert.equal(await spaced.text(), "spaced");

    const head = await get("/file.txt", { method: "HEAD" });
    assert.equal(head.status, 200);
    assert.equal(head.headers.get("content-type"), "text/plain; charset=utf-8");
    assert.equal(head.headers.get("content-length"), "4");
    assert.equal(await head.text(), "");
  });

  test("no path or symlink escapes the run's directory", async () => {
    for (const path of ["/link-out", "/link-in", "/linkdir/hostname", "/up/admin.token", "/missing.txt", "/sub", "/sub/dir"]) {
      const res = await get(path);
      assert.equal(res.status, 404, path);
      assert.deepEqual(await res.json(), { error: "Artifact file not found" }, path);
    }
    const base = `/api/v1/test-runs/${id}/artifacts/`;
    for (const path of [
      `${base}../../../../admin.token`,
      `${base}sub/../../${id}/file.txt`,
      `${base}%2e%2e/%2e%2e/%2e%2e/admin.token`,
      `${base}..%2F..%2F..%2Fadmin.token`,
      `${base}%2Fetc%2Fhostname`,
      `${base}file.txt%00.png`,
    ]) {
      const res = await rawGet(s.url, path, s.adminToken);
      assert.equal(res.status, 404, path);
      assert.equal(typeof (JSON.parse(res.body) as { error: string }).error, "string", path);
      assert.doesNotMatch(res.body, /eyJ/, "no token content");
    }
  });

  test("a run aborted while pending has an empty listing", async () => {
    await uploadConfig(s, "slow.yml", "tests:\n  g:\n  - sleep:\n      seconds: 5\n");
    const running = await trigger(s, { config_name: "slow.yml" });
    const pending = await trigger(s, { config_name: "slow.yml" });
    assert.equal((await s.request(`/api/v1/test-runs/${pending.id}`, { method: "DELETE", token: s.adminToken })).status, 200);
    const res = await s.request(`/api/v1/test-runs/${pending.id}/artifacts`, { token: s.adminToken });
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), []);
    await s.request(`/api/v1/test-runs/${running.id}`, { method: "DELETE", token: s.adminToken });
    await waitRun(s, running.id);
  });
});
