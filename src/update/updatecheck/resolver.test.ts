import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { compatible, resolve, type Meta } from "./resolver.ts";

const keys = { version: "svc.software.version", devtype: "svc.hardware.devtype" };
const dev = (version: string, extra: Record<string, string> = {}): Meta => ({ "svc.software.version": version, "svc.hardware.devtype": "board", "svc.hardware.macaddr": "00:11:22:33:44:55", ...extra });
const pkg = (version: string, extra: Record<string, string> = {}, devtype = "board"): Meta => ({ "svc.software.version": version, "svc.hardware.devtype": devtype, ...extra });

describe("update check resolver (6.2)", () => {
  it("offers a direct package, including downgrades", () => {
    assert.equal(resolve(dev("v1"), [pkg("v2")], "v2", keys), 0);
    assert.equal(resolve(dev("v5"), [pkg("v5"), pkg("v4")], "v4", keys), 1);
  });

  it("offers nothing without a target, at the target, or without a package of the target version", () => {
    assert.equal(resolve(dev("v1"), [pkg("v2")], undefined, keys), undefined);
    assert.equal(resolve(dev("v2"), [pkg("v2")], "v2", keys), undefined);
    assert.equal(resolve(dev("v1"), [pkg("v2")], "v3", keys), undefined);
    assert.equal(resolve(dev("v1"), [], "v2", keys), undefined);
  });

  it("ignores packages of another device type", () => {
    assert.equal(resolve(dev("v1"), [pkg("v2", {}, "other")], "v2", keys), undefined);
    assert.equal(resolve(dev("v1"), [pkg("v2", {}, "other"), pkg("v2")], "v2", keys), 1);
  });

  it("walks several hops and returns the first one", () => {
    const chain = [pkg("v3", { "requires:svc.software.version": "v2" }), pkg("v2", { "requires:svc.software.version": "v1" })];
    assert.equal(resolve(dev("v1"), chain, "v3", keys), 1);
    assert.equal(resolve(dev("v2"), chain, "v3", keys), 0);
    // Package-to-package edges use the package's metadata.
    assert.equal(resolve(dev("v1"), [pkg("v2"), pkg("v3", { "requires:svc.software.version": "v2" })], "v3", keys), 0);
  });

  it("finds no path when a hop is missing", () => {
    assert.equal(resolve(dev("v1"), [pkg("v3", { "requires:svc.software.version": "v2" })], "v3", keys), undefined);
  });

  it("prefers fewer hops over a lower package id", () => {
    const packages = [pkg("v2"), pkg("v3", { "requires:svc.software.version": "v2" }), pkg("v3")];
    assert.equal(resolve(dev("v1"), packages, "v3", keys), 2);
  });

  it("breaks ties by the lowest package id (delta before full when both fit)", () => {
    const delta = pkg("v2", { "requires:svc.software.version": "v1", "requires:svc.software.supports_xdelta": "true" });
    const full = pkg("v2");
    assert.equal(resolve(dev("v1", { "svc.software.supports_xdelta": "true" }), [delta, full], "v2", keys), 0);
    assert.equal(resolve(dev("v1"), [full, pkg("v2")], "v2", keys), 0);
  });

  it("honours requires: clauses against the device (mismatch falls back to a full package or nothing)", () => {
    const delta = pkg("v2", { "requires:svc.software.supports_xdelta": "true" });
    assert.equal(resolve(dev("v1"), [delta], "v2", keys), undefined);
    assert.equal(resolve(dev("v1", { "svc.software.supports_xdelta": "false" }), [delta], "v2", keys), undefined);
    assert.equal(resolve(dev("v1", { "svc.software.supports_xdelta": "TRUE" }), [delta], "v2", keys), undefined, "case-sensitive");
    assert.equal(resolve(dev("v1"), [delta, pkg("v2")], "v2", keys), 1);
  });

  it("gives each device the per-base delta it can install", () => {
    const packages = [pkg("v3", { "requires:svc.software.version": "v1" }), pkg("v3", { "requires:svc.software.version": "v2" })];
    assert.equal(resolve(dev("v1"), packages, "v3", keys), 0);
    assert.equal(resolve(dev("v2"), packages, "v3", keys), 1);
  });

  it("never takes a first hop checked against another package of the running version (17.16)", () => {
    const sameVersion = pkg("v1", { "svc.software.supports_xdelta": "true" });
    const delta = pkg("v2", { "requires:svc.software.supports_xdelta": "true" });
    assert.equal(resolve(dev("v1"), [sameVersion, delta], "v2", keys), undefined);
  });

  it("compatible(): requires, version and devtype", () => {
    assert.equal(compatible(dev("v1"), pkg("v2"), keys), true);
    assert.equal(compatible(dev("v1"), pkg("v1"), keys), false);
    assert.equal(compatible(dev("v1"), pkg("v2", {}, "x"), keys), false);
    assert.equal(compatible(dev("v1"), pkg("v2", { "requires:region": "eu" }), keys), false);
    assert.equal(compatible(dev("v1", { region: "eu" }), pkg("v2", { "requires:region": "eu" }), keys), true);
  });
});
