/**
 * The shapes of the WebSocket routes' requests: channel/routes.ts registers them with the routes
 * (the OpenAPI document shows them). The messages on the sockets: src/protocol/labgate/device.ts.
 */
import * as z from "zod";

/** A browser cannot set headers on a WebSocket: the manager's token may come in the query. */
export const ShellQuery = z.object({ token: z.string().optional().describe("the management token, for browsers") });
