import { errors, type Operation } from "../http/openapi.ts";

/** The web console's own routes (src/console/routes.ts): public, they hold no data. */
export const consoleOperations: Operation[] = [
  { method: "get", path: "/", tag: "console", access: "public", summary: "The web console's page", responses: { 200: { description: "The page", media: "text/html" } } },
  {
    method: "get",
    path: "/console/{name}",
    tag: "console",
    access: "public",
    summary: "A script or style of the console (named by content hash, cached for good)",
    responses: { 200: { description: "The file", media: "text/javascript" }, 404: errors[404] },
  },
];
