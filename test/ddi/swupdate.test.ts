/*
 * A real, unchanged `swupdate -u` (Debian's 2022.12, suricatta in hawkBit mode) against labgate:
 * with a target token made through the API it installs a CMS-signed .swu (made here with openssl
 * and cpio) through a deployment, closes the action after its restart (`-c 2`, as after the
 * reboot into the new image), and a second deployment's abort reaches it as a cancel.
 */
import assert from "node:assert/strict";
import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { after, test } from "node:test";
import { useTestServer, waitFor } from "../helpers/server.ts";
import { uploadOk } from "../update/helpers/packages.ts";
import { makeSigner, makeSwu, removeAll, startSwupdate, workDir, type SwupdateClient } from "./helpers.ts";

const clients: SwupdateClient[] = [];
after(async () => {
  for (const client of clients) await client.stop();
  removeAll();
});
const server = useTestServer({ update_server: { ddi: { tenant: "DEFAULT", polling_interval: 1 } } });

test("swupdate installs a signed .swu through a deployment, confirms it after its restart; an abort reaches it as a cancel", { timeout: 170_000 }, async () => {
  const work = workDir("labgate-swu-");
  const signer = makeSigner(work);
  const target = join(work, "target");
  const path = join(target, "app.conf");
    mkdirSync(target);

  const created = await server.call("POST", "/api/v1/ddi/targets", { controller_id: "swu-board-1", name: "SWUpdate board", device_type: "qemu-swu" });
  assert.equal(created.status, 200, JSON.stringify(created.body));
  const { controller_id: controllerId, device_id: deviceId, target_token: token } = created.body;
  const group = (await server.call("POST", "/api/v2/groups", { metadata: { name: "swu-lab" } })).body.id as number;
  assert.equal((await server.call("PATCH", `/api/v2/groups/${group}/devices`, { add: [deviceId], remove: [] })).status, 200);

  const deploy = async (version: string) => {
    const pkg = await uploadOk(server, { token: server.adminToken, version, devtype: "qemu-swu", file: makeSwu(work, signer, version, path, `${version}\n`), filename: `${version}.swu` });
    assert.equal((await server.call("POST", `/api/v2/groups/${group}/package`, { packages: [pkg.id] })).status, 200);
    const made = await server.call("POST", "/api/v2/deployments", { group, version, phases: [100], success_percent: 100, error_percent: 100, retries: 0 });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    return made.body.id as number;
  };
  const member = async (deployment: number) => (await server.call<any[]>("GET", `/api/v2/deployments/${deployment}/devices?limit=10`)).body[0];
  const log = () => clients.map((c) => c.output().split("\n").filter((l) => !/lua_report_exception|Suricatta awakened|No pending action|effective URL|server_set_config_data|print_registered/.test(l)).join("\n").slice(-20_000)).join("\n---\n");
  /** waitFor, failing with what the clients printed meanwhile. */
  const until = async <T>(check: () => Promise<T>, what: string) => {
    try {
      return await waitFor(check, 30_000, what);
    } catch (error) {
      throw new Error(`${(error as Error).message}\n${log()}`);
    }
  };

  const first = await deploy("release-2");
  clients.push(startSwupdate({ serverUrl: server.url, controllerId, token, signer }));
  await until(async () => (await member(first)).state === "installing", "release-2 installing");
  assert.ok(existsSync(path));
  assert.equal(readFileSync(path, "utf8"), "release-2\n");

  // The restart after the update: the new image confirms it, and the action closes with success.
  await clients.pop()!.stop();
  clients.push(startSwupdate({ serverUrl: server.url, controllerId, token, signer, confirm: 2 }));
  await until(async () => (await member(first)).state === "installed", "release-2 installed");
  await until(async () => (await server.call("GET", `/api/v2/deployments/${first}`)).body.status === "completed", "release-2 completed");
  assert.equal((await server.call("GET", `/api/v2/devices/${deviceId}`)).body.metadata["svc.software.version"], "release-2");

  // The next deployment is installed, waiting for its confirmation, when it is aborted: the client hears a cancel.
  const second = await deploy("release-3");
  await until(async () => (await member(second)).state === "installing", "release-3 installing");
  assert.equal((await server.call("POST", `/api/v2/deployments/${second}/abort`)).status, 200);
  const view = await until(async () => {
    const body = (await server.call("GET", `/api/v1/ddi/targets/${controllerId}`)).body;
    return body.actions[0].state === "canceled" ? body : undefined;
  }, "release-3 cancelled");
  assert.equal(view.actions[0].version, "release-3");
  assert.match(view.actions[0].details, /cancellation acknowledged/);
  assert.deepEqual(view.actions.slice(1).map((a: any) => [a.version, a.state, a.result]), [["release-2", "closed", "success"]]);
});
