import { randomUUID } from "node:crypto";
import { join } from "node:path";
import { safeArtifactName } from "./artifact-names.ts";
import { assertion, boardPath, boardPathError, exists, readAttribute, removeRunFile, runFileNonEmpty, runTool, toolFailure } from "./hardware.ts";
import { given, num, optional, paramSchema, required, str } from "./params.ts";
import { fail, pass, skip, type EntryContext, type ModuleDef, type Outcome } from "./types.ts";

const device = (ctx: Pick<EntryContext, "params">) => str(ctx.params, "device")!;

interface CameraState {
  /** The device node is absent: every case fails with the reference's message. */
  missing?: boolean;
  /** `v4l2-ctl --info`, or why it could not be read. */
  info?: { driver?: string; card?: string } | { problem: string };
  model?: string;
}
const state = (ctx: Pick<EntryContext, "state">) => ctx.state as CameraState;

/** `Driver name : vivid` and `Card type : vivid` from `v4l2-ctl --info`. */
const infoField = (text: string, label: string) => new RegExp(`^\\s*${label}\\s*:\\s*(.*)$`, "m").exec(text)?.[1]?.trim();

async function info(ctx: EntryContext): Promise<CameraState["info"]> {
  const r = await runTool(ctx, ["v4l2-ctl", "-d", await boardPath(ctx.roots, device(ctx)), "--info"]);
  const problem = toolFailure(r, "v4l2-ctl --info");
  if (problem) return { problem };
  const driver = infoField(r.stdout, "Driver name");
  const card = infoField(r.stdout, "Card type");
  return { ...(driver === undefined ? {} : { driver }), ...(card === undefined ? {} : { card }) };
}

/** Captures one frame with v4l2-ctl into `file`; undefined when done, else why not. */
async function capture(ctx: EntryContext, file: string): Promise<string | undefined> {
  const format = str(ctx.params, "pixel_format");
  const timeout = num(ctx.params, "timeout", 30)!;
  const r = await runTool(
    ctx,
    ["v4l2-ctl", "-d", await boardPath(ctx.roots, device(ctx)), ...(format ? [`--set-fmt-video=pixelformat=${format}`] : []), "--stream-mmap", "--stream-count=1", `--stream-to=${file}`],
    timeout,
  );
  return toolFailure(r, "v4l2-ctl", timeout);
}

const compareInfo = (ctx: EntryContext, param: string, field: "driver" | "card", message: string, sysfsName?: string): Outcome => {
  if (state(ctx).missing) return assertion(`Device ${device(ctx)} doesn't exist`);
  if (!given(ctx.params, param)) return skip(`${param} parameter not set`);
  const i = state(ctx).info;
  const value = field === "card" && sysfsName !== undefined ? sysfsName : i && !("problem" in i) ? i[field] : undefined;
  if (value === undefined && i && "problem" in i) return fail(i.problem);
  return value === str(ctx.params, param) ? pass() : assertion(message);
};

/** `camera`: a V4L2 device gives a frame and has the expected names (protoplaster's `camera`, same cases and messages). */
export const cameraModule: ModuleDef = {
  key: "camera",
  className: "TestCamera",
  summary: "One frame from a V4L2 device (`v4l2-ctl`, package v4l-utils), its card and driver names; protoplaster's `camera`.",
  params: paramSchema(() => ({
    device: required("string", "the video device, such as `/dev/video0`"),
    camera_name: optional("string", "expected card name (`/sys/class/video4linux/videoN/name`, or `Card type` of `v4l2-ctl --info`)"),
    driver_name: optional("string", "expected `Driver name` of `v4l2-ctl --info`"),
    save_file: optional("string", "artifact file name the frame is saved as (a PNG or JPEG frame previews in the console)"),
    pixel_format: optional("string", "a V4L2 pixel format set before the capture, such as `MJPG`"),
    timeout: optional("number", "seconds the capture may take", 30),
  })),
  validate: (p) => boardPathError(p.device, "device", ["/dev"]) ?? (given(p, "save_file") && !safeArtifactName(String(p.save_file)) ? "parameter 'save_file': expected a plain file name" : undefined),
  deviceName: (ctx) => (state(ctx).model ? `${state(ctx).model}(${device(ctx)})` : device(ctx)),
  cases: () => [
    {
      name: "frame",
      async run(ctx) {
        if (state(ctx).missing) return assertion(`Device ${device(ctx)} doesn't exist`);
        const save = str(ctx.params, "save_file");
        // Without save_file the frame is looked at and removed again, as the reference keeps it in memory.
        const name = save ?? `.frame-${randomUUID()}`;
        try {
          const problem = await capture(ctx, join(ctx.artifactsDir, name));
          if (problem) return fail(problem);
          if (!(await runFileNonEmpty(ctx, name))) return assertion("The frame is invalid");
          if (save) ctx.recordArtifact(save);
          return pass();
        } finally {
          if (!save) await removeRunFile(ctx, name);
        }
      },
    },
    {
      name: "device_name",
      async run(ctx) {
        const node = /^video\d+$/.exec(device(ctx).split("/").pop() ?? "")?.[0];
        const sysfsName = node ? await readAttribute(ctx, `/sys/class/video4linux/${node}/name`) : undefined;
        return compareInfo(ctx, "camera_name", "card", "The device name is not correct", sysfsName);
      },
    },
    {
      name: "driver_name",
      run: (ctx) => compareInfo(ctx, "driver_name", "driver", "The driver name is not correct"),
    },
  ],
  async setup(ctx) {
    const s = state(ctx);
    // The tool does the I/O: a test tree's `dev/video0` may be a plain file.
    if (!(await exists(ctx, device(ctx)))) {
      s.missing = true;
      return;
    }
    if (given(ctx.params, "driver_name") || given(ctx.params, "camera_name")) s.info = await info(ctx);
    // The model for the device name, from udev where it knows the device.
    const udev = await runTool(ctx, ["udevadm", "info", "-q", "property", "-n", await boardPath(ctx.roots, device(ctx))], 10);
    const property = (key: string) => new RegExp(`^${key}=(.+)$`, "m").exec(udev.stdout)?.[1]?.trim();
    if (udev.exitCode === 0) s.model = property("ID_V4L_PRODUCT") ?? property("ID_MODEL");
  },
};
