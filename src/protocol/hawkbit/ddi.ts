/*
 * hawkBit's Direct Device Integration API as SWUpdate's suricatta (2022.12) and
 * rauc-hawkbit-updater speak it: what a target sends and what it expects, one schema each; the
 * routes (src/update/ddi/) parse and answer with them. Unknown fields are dropped, not refused:
 * clients send more than a server reads (`time`, the feedback's own `id`).
 */
import * as z from "zod";

/** Bounds of what a target may send: attributes and details are a few KB on a real device. */
export const LIMITS = { attributes: 256, name: 256, value: 4096, details: 64, detail: 4096 } as const;

/** The `execution` values of a feedback. */
export const EXECUTIONS = ["closed", "proceeding", "canceled", "scheduled", "rejected", "resumed", "downloaded", "download"] as const;
export type Execution = (typeof EXECUTIONS)[number];
export const FINISHED = ["success", "failure", "none"] as const;
export type Finished = (typeof FINISHED)[number];

/** A controller id: also the device's MAC address field, so it keeps that field's characters. */
export const ControllerId = z
  .string()
  .regex(/^[0-9A-Za-z][0-9A-Za-z:._-]{0,63}$/, 'field "controller_id" must be 1 to 64 letters, digits or ":._-", starting with a letter or digit');

const Link = z.object({ href: z.string() });

/** `GET /{tenant}/controller/v1/{controllerId}`: how long to sleep and what to do next. */
export const ControllerBase = z
  .object({
    config: z.object({ polling: z.object({ sleep: z.string().describe("HH:MM:SS") }) }),
    _links: z
      .object({
        deploymentBase: Link.optional().describe("an open action to install"),
        cancelAction: Link.optional().describe("an open action to cancel"),
        configData: Link.optional().describe("the target's attributes are wanted"),
      })
      .partial(),
  })
  .meta({ id: "DdiControllerBase" });
export type ControllerBase = z.infer<typeof ControllerBase>;

/** One artifact of a chunk: the package. */
export const Artifact = z.object({
  filename: z.string(),
  hashes: z.object({ sha1: z.string(), md5: z.string(), sha256: z.string() }),
  size: z.number().int(),
  _links: z.object({ download: Link, "download-http": Link, "md5sum-http": Link.optional() }),
});

/** `GET .../deploymentBase/{actionId}`: one chunk with the package as its artifact. */
export const DeploymentBase = z
  .object({
    id: z.string(),
    deployment: z.object({
      download: z.enum(["skip", "attempt", "forced"]),
      update: z.enum(["skip", "attempt", "forced"]),
      chunks: z.array(z.object({ part: z.string(), version: z.string(), name: z.string(), artifacts: z.array(Artifact) })),
    }),
  })
  .meta({ id: "DdiDeploymentBase" });
export type DeploymentBase = z.infer<typeof DeploymentBase>;

/** `GET .../cancelAction/{actionId}`. */
export const CancelAction = z.object({ id: z.string(), cancelAction: z.object({ stopId: z.string() }) }).meta({ id: "DdiCancelAction" });
export type CancelAction = z.infer<typeof CancelAction>;

const fieldError = (field: string, what: string) => ({ error: `field "${field}" ${what}` });

/** `POST .../deploymentBase/{actionId}/feedback` and `.../cancelAction/{actionId}/feedback`. */
export const ActionFeedback = z
  .object({
    status: z.object(
      {
        execution: z.enum(EXECUTIONS, fieldError("status.execution", `must be one of ${EXECUTIONS.join(", ")}`)),
        result: z
          .object({
            finished: z.enum(FINISHED, fieldError("status.result.finished", `must be one of ${FINISHED.join(", ")}`)),
            progress: z.object({ cnt: z.number().int().min(0), of: z.number().int().min(0) }, fieldError("status.result.progress", "must be {cnt, of}")).optional(),
          }, fieldError("status.result", 'must be {"finished": ...}'))
          .optional(),
        details: z.array(z.string().max(LIMITS.detail), fieldError("status.details", "must be a list of strings")).max(LIMITS.details).optional(),
      },
      fieldError("status", 'must be {"execution", "result", "details"}'),
    ),
  })
  .meta({ id: "DdiActionFeedback" });
export type ActionFeedback = z.infer<typeof ActionFeedback>;

/** `PUT .../configData`: the target's attributes. */
export const ConfigData = z
  .object({
    data: z
      .record(z.string().min(1).max(LIMITS.name), z.string(fieldError("data", "values must be strings")).max(LIMITS.value), fieldError("data", "must be an object of strings"))
      .refine((data) => Object.keys(data).length <= LIMITS.attributes, `field "data" has more than ${LIMITS.attributes} attributes`),
    mode: z.enum(["merge", "replace", "remove"], fieldError("mode", "must be merge, replace or remove")).optional(),
  })
  .meta({ id: "DdiConfigData" });
export type ConfigData = z.infer<typeof ConfigData>;

/** hawkBit's error body. */
export const DdiError = z.object({ exceptionClass: z.string(), errorCode: z.string(), message: z.string() }).meta({ id: "DdiError" });
export type DdiError = z.infer<typeof DdiError>;
