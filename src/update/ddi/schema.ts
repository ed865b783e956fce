/* The management API of DDI targets (`/api/v1/ddi/targets`): labgate's shapes, not hawkBit's. */
import * as z from "zod";
import { ControllerId } from "../../protocol/hawkbit/ddi.ts";

export const NewTarget = z
  .object({
    controller_id: ControllerId,
    name: z.string('field "name" must be a string').trim().min(1, 'field "name" must not be empty').max(128, 'field "name" is longer than 128 characters'),
    device_type: z.string('field "device_type" must be a string').min(1, 'field "device_type" must not be empty').max(256, 'field "device_type" is longer than 256 characters'),
  })
  .meta({ id: "DdiNewTarget" });

export const TargetCredentials = z
  .object({
    controller_id: z.string(),
    device_id: z.int(),
    target_token: z.string().describe("the device's `Authorization: TargetToken <token>`; shown only in this answer"),
  })
  .meta({ id: "DdiTargetCredentials" });

export const TargetView = z
  .object({
    controller_id: z.string(),
    device_id: z.int(),
    token: z.enum(["set", "revoked"]),
    created: z.string(),
    token_set: z.string().describe("when the token was last set or revoked"),
    actions: z.array(
      z.object({
        id: z.int(),
        deployment: z.int().nullable(),
        version: z.string(),
        state: z.enum(["open", "closed", "canceled"]),
        result: z.enum(["success", "failure"]).nullable(),
        details: z.string().nullable().describe("the device's last details (its log), at most 4 KiB"),
        updated: z.string(),
      }),
    ),
  })
  .meta({ id: "DdiTargetView" });
