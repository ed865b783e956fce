/* The console's registry (src/server/api.ts) answers with the routers' own reply types: checked by `npm run typecheck`. */
import type { OperationAt, ReplyAt } from "../../src/http/openapi.ts";
import type { Api } from "../../src/server/api.ts";
import type { Group } from "../../src/update/groups/schema.ts";
import type { Device } from "../../src/update/devices/schema.ts";

export const groups: ReplyAt<OperationAt<Api, "get", "/api/v2/groups">> = [] as Group[];
export const device: Device = {} as ReplyAt<OperationAt<Api, "get", "/api/v2/devices/:id{[0-9]+}">>;
// @ts-expect-error: a group is no device
export const wrong: ReplyAt<OperationAt<Api, "get", "/api/v2/groups/:id">> = {} as Device;
