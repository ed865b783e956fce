/* The update check's memo over the resolver (catalog.ts: resolveInPlan, retarget): the same answer as the resolver, kept per relevant metadata. */
import assert from "node:assert/strict";
import { test } from "node:test";
import { resolveInPlan, retarget, type GroupPlan } from "./catalog.ts";
import type { Meta } from "./resolver.ts";

const keys = { version: "svc.software.version", devtype: "svc.hardware.devtype" };
const device = (version: string, extra: Record<string, string> = {}): Meta => ({ "svc.software.version": version, "svc.hardware.devtype": "board", ...extra });

function plan(target: string | undefined, metas: Meta[]): GroupPlan {
  const packages = metas.map((metadata, i) => ({ id: i + 1, created: "", sha256: "", storageName: "", version: String(metadata[keys.version]), metadata }));
  const requiredKeys = [...new Set(metas.flatMap((m) => Object.keys(m).filter((k) => k.startsWith("requires:")).map((k) => k.slice("requires:".length))))];
  return { target, packages, metas, requiredKeys, answers: new Map() };
}

test("devices that differ only in metadata no package requires share one answer; a required key keeps them apart", () => {
  const delta = { ...device("v2"), "requires:svc.software.version": "v1", "requires:svc.software.supports_xdelta": "true" };
  const p = plan("v2", [delta, device("v2")]);
  assert.equal(resolveInPlan(p, device("v1", { "svc.software.supports_xdelta": "true", "svc.hardware.macaddr": "aa" }), keys), 0);
  assert.equal(resolveInPlan(p, device("v1", { "svc.software.supports_xdelta": "true", "svc.hardware.macaddr": "bb" }), keys), 0);
  assert.equal(p.answers.size, 1, "the MAC address is no part of the key");
  assert.equal(resolveInPlan(p, device("v1"), keys), 1, "without xdelta support: the full package");
  assert.equal(resolveInPlan(p, device("v2"), keys), undefined, "at the target");
  assert.equal(p.answers.size, 3);
});

test("another target (a deployment's) gets a plan of its own with the same packages, kept for the next check", () => {
  const p = plan("v2", [device("v2"), device("v3")]);
  assert.equal(retarget(p, "v2"), p, "the group's own target: the group's plan");
  const v3 = retarget(p, "v3");
  assert.equal(v3.packages, p.packages);
  assert.equal(retarget(p, "v3"), v3, "the same plan again");
  assert.equal(resolveInPlan(v3, device("v1"), keys), 1);
  assert.equal(resolveInPlan(p, device("v1"), keys), 0, "the group's memo is its own");
});
