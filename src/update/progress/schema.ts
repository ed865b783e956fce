/**
 * The update progress API's shape: progress/routes.ts registers it with the routes (the OpenAPI
 * document shows it), the handlers answer with it, the console imports the type.
 */
import * as z from "zod";
import { Rfc822 } from "../../util/shapes.ts";

/** A device that is updating: what it was offered and how far it got (its `update_progress` reports). */
export const Progress = z
  .object({
    id: z.int().describe("the device"),
    mac_address: z.string(),
    created: Rfc822.describe("when the update was offered"),
    version: z.string().describe("the version offered"),
    progress: z.int().describe("percent, as the device last reported it"),
  })
  .meta({ id: "Progress" });
export type Progress = z.infer<typeof Progress>;
