// The composition roots build working services without HTTP: a real database in a temp dir, no listener.
import assert from "node:assert/strict";
import { singleNode } from "../../src/cluster/cluster.ts";
import { Readable } from "node:stream";
import { after, before, describe, test } from "node:test";
import { loadOrCreateKeys } from "../../src/auth/keys.ts";
import { TokenService } from "../../src/auth/tokens.ts";
import { loadConfig } from "../../src/config/config.ts";
import { Database, migrate, migrations } from "../../src/db/index.ts";
import { embeddedStore } from "../../src/db/store.ts";
import type { AppContext } from "../../src/app/context.ts";
import { createTestRunDomain, type TestRunDomain } from "../../src/testrun/domain.ts";
import { SHUTDOWN_ERROR } from "../../src/testrun/runs/service.ts";
import { deleteDevice } from "../../src/update/devices/devices.ts";
import { systemActor } from "../../src/audit/audit.ts";
import { createUpdateDomain, type UpdateDomain } from "../../src/update/domain.ts";
import { createLogger } from "../../src/util/log.ts";
import { removeDir, tempDir } from "../helpers/server.ts";
import { systemClock } from "../../src/util/time.ts";
import { LocalStorage } from "../../src/storage/local.ts";
import { localStorageDir } from "../../src/storage/open.ts";

/** What startServer gives the roots, minus the listener. */
async function openContext(dataDir: string): Promise<AppContext & { db: Database }> {
  const { config } = loadConfig({ env: {}, cwd: dataDir, flags: { dataDir } });
  const db = await Database.open(dataDir);
  await migrate(db, migrations);
  const tokens = new TokenService(loadOrCreateKeys(dataDir), config.prefix);
  return { config, dataDir, db, store: embeddedStore(db), tokens, log: createLogger("error"), version: "test", clock: systemClock, startedAt: new Date(), objects: new LocalStorage(localStorageDir(config)), cluster: singleNode("test", ""), onClosing: [], onShutdown: [] };
}

/** The server's own close, without the listener: closing hooks, then shutdown work. */
async function shutDown(ctx: AppContext): Promise<void> {
  for (const hook of ctx.onClosing) hook();
  for (const hook of ctx.onShutdown) await hook();
}

describe("createTestRunDomain", () => {
  const dataDir = tempDir();
  let ctx: AppContext & { db: Database };
  let domain: TestRunDomain;
  before(async () => {
    ctx = await openContext(dataDir);
    domain = createTestRunDomain(ctx);
  });
  after(async () => {
    await ctx.db.close();
    removeDir(dataDir);
  });

  test("a saved config runs through the queue to `finished`, its changes heard; shutdown aborts what is left", async () => {
    await domain.configs.save("quick.yml", Readable.from([Buffer.from("tests:\n  g:\n  - sleep:\n      seconds: 0\n")]));
    await domain.configs.save("slow.yml", Readable.from([Buffer.from("tests:\n  g:\n  - sleep:\n      seconds: 30\n")]));
    const changed: string[] = [];
    domain.changes.subscribe((change) => changed.push(`${change.kind} ${change.id}`));
    const request = { configName: "quick.yml", suite: "", machineTarget: null, overrides: null, pattern: "" };

    const quick = await domain.runs.trigger(request);
    assert.equal(quick.kind, "run");
    const id = (quick as { run: { id: string } }).run.id;
    await domain.runs.waitForEnd(id, 15_000);
    assert.equal((await domain.runs.store.getRun(id))?.status, "finished");
    assert.ok(changed.includes(`run ${id}`), changed.join(", "));

    const slow = await domain.runs.trigger({ ...request, configName: "slow.yml" });
    const queued = await domain.runs.trigger({ ...request, configName: "slow.yml" });
    await shutDown(ctx);
    for (const result of [slow, queued]) {
      const run = (result as { run: { id: string } }).run;
      const after = await domain.runs.store.getRun(run.id);
      assert.equal(after?.status, "aborted");
      assert.equal(after?.error, SHUTDOWN_ERROR);
    }
  });
});

describe("createUpdateDomain", () => {
  const dataDir = tempDir();
  let ctx: AppContext & { db: Database };
  let domain: UpdateDomain;
  before(async () => {
    ctx = await openContext(dataDir);
    domain = createUpdateDomain(ctx);
  });
  after(async () => {
    await shutDown(ctx);
    await ctx.db.close();
    removeDir(dataDir);
  });

  test("an action for an offline device is queued; deleting the device takes its action log (the root's deletion hook)", async () => {
    const mac = "aa:bb:cc:00:00:01";
    const { id: deviceId } = await ctx.store.query
      .insertInto("devices")
      .values({ created: new Date().toISOString(), name: "d1", mac_address: mac, capabilities: "{}", metadata: "{}" })
      .returning("id")
      .executeTakeFirstOrThrow();
    assert.equal(await domain.deviceGate({ kind: "device", mac, deviceId, key: "", expiresAt: 0 } as never), true, "the root installs the device gate");

    assert.deepEqual(await domain.actions.exec(mac, "reboot", systemActor("test", new Date())), { queued: true });
    assert.deepEqual((await domain.actions.log(mac, "http://x")).map((e) => [e.action, e.status]), [["reboot", "pending"]]);

    assert.equal(await deleteDevice(ctx.store, domain.deviceHooks, deviceId, systemActor("test", new Date())), true);
    assert.deepEqual(await domain.actions.log(mac, "http://x"), []);
    assert.equal(await domain.deviceGate({ kind: "device", mac, deviceId, key: "", expiresAt: 0 } as never), false);
  });
});
