import { assertion, exists, listDir, readAttribute } from "./hardware.ts";
import { given, optional, paramSchema, required, str } from "./params.ts";
import { fail, pass, skip, type CaseDef, type EntryContext, type ModuleDef } from "./types.ts";

const USB_DEVICES = "/sys/bus/usb/devices";
const VID_PID = /^([0-9a-f]{4}):([0-9a-f]{4})$/i;

interface UsbState {
  /** The device's sysfs name (`1-1.2`), found in set-up; undefined when absent. */
  name?: string;
}

const state = (ctx: Pick<EntryContext, "state">) => ctx.state as UsbState;
const hexId = (v: unknown) => String(v).toLowerCase().replace(/^0x/, "").padStart(4, "0");

/** `usbdev`: a USB device in /sys/bus/usb/devices (protoplaster's `usbdev`; `device` may also be `vid:pid`). */
export const usbdevModule: ModuleDef = {
  key: "usbdev",
  className: "TestUsb",
  summary: "A USB device is present (by sysfs name or vendor:product), its negotiated speed and IDs; protoplaster's `usbdev`.",
  params: paramSchema(() => ({
    device: required("string", "sysfs name such as `1-1.2`, or `vendor:product` in hex such as `0bda:5411`"),
    speed: optional("string", "negotiated speed in Mb/s as the kernel writes it (`1.5`, `12`, `480`, `5000`)"),
    vendor_id: optional("string", "expected `idVendor` (hex)"),
    product_id: optional("string", "expected `idProduct` (hex)"),
  })),
  validate: (p) => (/^[^/\0]+$/.test(String(p.device)) && !/^\.\.?$/.test(String(p.device)) ? undefined : "parameter 'device': expected a sysfs device name or vendor:product"),
  deviceName: ({ params }) => `usb(${str(params, "device")})`,
  cases({ params }) {
    const cases: CaseDef[] = [
      {
        name: "sysfs_interface",
        run(ctx) {
          if (state(ctx).name) return pass();
          const device = str(ctx.params, "device")!;
          return VID_PID.test(device) ? assertion(`No USB device with ID ${device.toLowerCase()} in ${USB_DEVICES}`) : assertion(`USB interface ${USB_DEVICES}/${device} doesn't exist`);
        },
      },
      {
        name: "negotiated_speed",
        async run(ctx) {
          if (!given(ctx.params, "speed")) return skip("speed parameter not set");
          const file = `${USB_DEVICES}/${state(ctx).name ?? str(ctx.params, "device")}/speed`;
          const current = state(ctx).name ? await readAttribute(ctx, `${USB_DEVICES}/${state(ctx).name}/speed`) : undefined;
          if (current === undefined) return assertion(`Could not find speed file: ${file} (is the device connected?)`);
          const want = str(ctx.params, "speed");
          return current === want ? pass() : assertion(`Expected USB speed ${want} Mbps, but got ${current} Mbps`);
        },
      },
    ];
    if (given(params, "vendor_id") || given(params, "product_id"))
      cases.push({
        name: "ids",
        async run(ctx) {
          const name = state(ctx).name;
          if (!name) return fail(`USB device ${str(ctx.params, "device")} not found`);
          for (const [key, file] of [
            ["vendor_id", "idVendor"],
            ["product_id", "idProduct"],
          ] as const) {
            if (!given(ctx.params, key)) continue;
            const value = await readAttribute(ctx, `${USB_DEVICES}/${name}/${file}`);
            if (value?.toLowerCase() !== hexId(ctx.params[key])) return fail(`${file} is ${value ?? "unreadable"}, expected ${hexId(ctx.params[key])}`);
          }
          return pass();
        },
      });
    return cases;
  },
  async setup(ctx) {
    const device = str(ctx.params, "device")!;
    const ids = VID_PID.exec(device);
    if (!ids) {
      if (await exists(ctx, `${USB_DEVICES}/${device}`)) state(ctx).name = device;
      return;
    }
    for (const name of await listDir(ctx, USB_DEVICES)) {
      const vendor = await readAttribute(ctx, `${USB_DEVICES}/${name}/idVendor`);
      if (vendor?.toLowerCase() !== ids[1]!.toLowerCase()) continue;
      if ((await readAttribute(ctx, `${USB_DEVICES}/${name}/idProduct`))?.toLowerCase() === ids[2]!.toLowerCase()) {
        state(ctx).name = name;
        return;
      }
    }
  },
};
