import assert from "node:assert/strict";
import { before, describe, test } from "node:test";
import { useTestServer } from "../helpers/server.ts";
import { registerDevice } from "./helpers/devices.ts";

interface Listed {
  id: number;
  name: string;
  mac_address: string;
}

describe("device lists: limit, offset, q and X-Total-Count (issue 11)", () => {
  const server = useTestServer();
  const ids: number[] = [];
  const macs: string[] = [];
  before(async () => {
    const extras: Array<Record<string, string>> = [
      { "svc.device.name": "lab-alpha" },
      { "svc.device.name": "Lab-Beta", "svc.software.version": "v2.0-rc", "svc.hardware.devtype": "Board-X" },
      ...[1, 2, 3, 4].map((n) => ({ "svc.device.name": `node-${n}` })),
    ];
    for (const extra of extras) {
      const { id, client } = await registerDevice(server, { extra });
      ids.push(id);
      macs.push(client.mac);
    }
  });

  const list = async (path: string, token = server.adminToken) => {
    const res = await server.request(path, { token });
    assert.equal(res.status, 200, await res.clone().text());
    return { total: res.headers.get("x-total-count"), devices: (await res.json()) as Listed[] };
  };

  test("without the parameters: every device, no X-Total-Count (today's answer)", async () => {
    for (const path of ["/api/v2/devices", "/api/v1/devices"]) {
      const { total, devices } = await list(path);
      assert.equal(total, null);
      assert.deepEqual(devices.map((d) => d.id), ids);
    }
  });

  test("limit and offset page through the devices in id order; X-Total-Count counts every match", async () => {
    for (const path of ["/api/v2/devices", "/api/v1/devices"]) {
      const first = await list(`${path}?limit=2`);
      assert.equal(first.total, "6");
      assert.deepEqual(first.devices.map((d) => d.id), ids.slice(0, 2));
      const second = await list(`${path}?limit=2&offset=2`);
      assert.deepEqual(second.devices.map((d) => d.id), ids.slice(2, 4));
      const rest = await list(`${path}?offset=5`);
      assert.equal(rest.total, "6");
      assert.deepEqual(rest.devices.map((d) => d.id), ids.slice(5));
      const beyond = await list(`${path}?offset=100&limit=10`);
      assert.deepEqual(beyond, { total: "6", devices: [] });
    }
    const v1 = (await list("/api/v1/devices?limit=1")).devices[0] as unknown as Record<string, unknown>;
    const v2 = (await list("/api/v2/devices?limit=1")).devices[0] as unknown as Record<string, unknown>;
    assert.ok("group" in v1 && !("groups" in v1), "v1 shape");
    assert.ok("groups" in v2 && "connected" in v2, "v2 shape");
  });

  test("q: a case-insensitive substring of name, MAC address, version or device type; wildcards are literal", async () => {
    const matches = async (q: string, path = "/api/v2/devices") => {
      const { total, devices } = await list(`${path}?q=${encodeURIComponent(q)}`);
      assert.equal(Number(total), devices.length);
      return devices.map((d) => d.id);
    };
    assert.deepEqual(await matches("LAB-"), ids.slice(0, 2), "name");
    assert.deepEqual(await matches("v2.0"), [ids[1]], "version");
    assert.deepEqual(await matches("board-x"), [ids[1]], "device type");
    assert.deepEqual(await matches(macs[3].toUpperCase()), [ids[3]], "MAC address");
    assert.deepEqual(await matches("node", "/api/v1/devices"), ids.slice(2));
    assert.deepEqual(await matches("%"), []);
    assert.deepEqual(await matches("lab_"), []);
    assert.deepEqual(await matches(""), ids, "an empty q matches every device");
    const page = await list(`/api/v2/devices?q=node&limit=2&offset=1`);
    assert.equal(page.total, "4");
    assert.deepEqual(page.devices.map((d) => d.id), ids.slice(3, 5));
  });

  test("q matches a device's id", async () => {
    const { devices } = await list(`/api/v2/devices?q=${ids[4]}`);
    assert.ok(devices.some((d) => d.id === ids[4]));
  });

  test("paging applies after the per-user permissions: the total counts only what the caller may read", async () => {
    const perm = await server.request("/api/v1/permissions", {
      method: "POST",
      token: server.adminToken,
      json: { resource: "device", resource_id: ids[1], user_id: "pat", permission: "read" },
    });
    assert.equal(perm.status, 200);
    const pat = server.token([], "pat");
    const paged = await list("/api/v2/devices?limit=10", pat);
    assert.equal(paged.total, "1");
    assert.deepEqual(paged.devices.map((d) => d.id), [ids[1]]);
    assert.deepEqual((await list("/api/v2/devices?q=lab", pat)).devices.map((d) => d.id), [ids[1]]);
  });

  test("bad values are a 400 naming the parameter", async () => {
    for (const [query, message] of [
      ["limit=0", /"limit" must be an integer from 1 to 1000/],
      ["limit=1001", /"limit"/],
      ["limit=ten", /"limit"/],
      ["offset=-1", /"offset" must be an integer from 0/],
      [`q=${"x".repeat(257)}`, /"q" must be at most 256 characters/],
    ] as const) {
      for (const path of ["/api/v2/devices", "/api/v1/devices"]) {
        const res = await server.request(`${path}?${query}`, { token: server.adminToken });
        assert.equal(res.status, 400, `${path}?${query}`);
        assert.match(((await res.json()) as { error: string }).error, message);
      }
    }
  });
});
