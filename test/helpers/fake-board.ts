/**
 * A board without hardware, for the hardware test modules: a fake sysfs, /dev and firmware tree
 * in a temp dir (the server's `test_server.sys_root`, `dev_root`, `firmware_root`), and stand-ins
 * for the tools the modules run (i2cget, gpioget/gpioset, v4l2-ctl, memtester, spidev_test, spi-pipe) that answer from
 * files in the same tree. Each test writes the tree it needs (`reset()` first).
 */
import { execFileSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { crc32, deflateSync } from "node:zlib";
import { tempDir } from "./server.ts";

// The stand-ins read what a device would answer from $LABGATE_FAKE_HW/tools/...
const TOOLS: Record<string, string> = {
  // i2cget -y -f BUS ADDR [REG [MODE]]: a device is a directory tools/i2c/BUS/ADDR; a register a file in it.
  i2cget: `[ -d "$LABGATE_FAKE_HW/tools/i2c/$3" ] || { echo "Error: Could not open file \\\`/dev/i2c-$3' or \\\`/dev/i2c/$3': No such file or directory" >&2; exit 1; }
dir="$LABGATE_FAKE_HW/tools/i2c/$3/$4"
[ -d "$dir" ] || { echo "Error: Read failed" >&2; exit 2; }
if [ -n "$5" ]; then [ -f "$dir/$5" ] || { echo "Error: Read failed" >&2; exit 2; }; read v < "$dir/$5"; echo "$v"; else echo 0x00; fi
`,
  // gpioget [--version] | v1: CHIP LINE | v2: --numeric [--as-is] -c CHIP LINE; a line's value is tools/gpio/<chip base name>/LINE.
  gpioget: `log="$LABGATE_FAKE_HW/tools/gpio.log"; echo "gpioget $*" >> "$log"
if [ "$1" = --version ]; then v=1.6.3; [ -f "$LABGATE_FAKE_HW/tools/gpiod-version" ] && read v < "$LABGATE_FAKE_HW/tools/gpiod-version"; echo "gpioget (libgpiod) v$v"; exit 0; fi
while [ "$1" = --numeric ] || [ "$1" = --as-is ] || [ "$1" = -c ]; do [ "$1" = -c ] && { shift; chip="$1"; }; shift; done
[ -z "$chip" ] && { chip="$1"; shift; }
[ -e "$chip" ] || { echo "gpioget: unable to open chip '$chip'" >&2; exit 1; }
f="$LABGATE_FAKE_HW/tools/gpio/\${chip##*/}/$1"; [ -f "$f" ] || { echo "gpioget: line $1 not found" >&2; exit 1; }
read v < "$f"; echo "$v"
`,
  gpioset: `echo "gpioset $*" >> "$LABGATE_FAKE_HW/tools/gpio.log"
while [ "$1" = -t0 ] || [ "$1" = -c ]; do [ "$1" = -c ] && { shift; chip="$1"; }; shift; done
[ -z "$chip" ] && { chip="$1"; shift; }
[ -e "$chip" ] || { echo "gpioset: unable to open chip '$chip'" >&2; exit 1; }
d="$LABGATE_FAKE_HW/tools/gpio/\${chip##*/}"; mkdir -p "$d"
[ -f "$LABGATE_FAKE_HW/tools/gpio-stuck" ] && exit 0
echo "\${1#*=}" > "$d/\${1%%=*}"
`,
  // v4l2-ctl -d DEV --info | -d DEV [--set-fmt-video=...] --stream-mmap --stream-count=1 --stream-to=FILE
  "v4l2-ctl": `echo "v4l2-ctl $*" >> "$LABGATE_FAKE_HW/tools/v4l2.log"
dev="$2"; dir="$LABGATE_FAKE_HW/tools/v4l2/\${dev##*/}"
[ -e "$dev" ] || { echo "Cannot open device $dev" >&2; exit 1; }
for a; do case "$a" in
  --info) echo "Driver Info:"; echo "	Driver name      : $(cat "$dir/driver")"; echo "	Card type        : $(cat "$dir/card")"; exit 0 ;;
  --stream-to=*) cat "$dir/frame" > "\${a#--stream-to=}"; echo "<"; exit 0 ;;
esac; done
exit 1
`,
  // udevadm info -q property -n DEV: the device's udev properties are tools/udev/<base name>.
  udevadm: `f="$LABGATE_FAKE_HW/tools/udev/\${5##*/}"; [ -f "$f" ] || { echo "Unknown device \"$5\"" >&2; exit 4; }; cat "$f"
`,
  // spidev_test -D DEV -i IN -o OUT and spi-pipe -d DEV -b N -n 1 <IN >OUT: a device whose MISO is wired to MOSI
  // has tools/spi/<base name>/loop (the answer is what was sent), else it answers zeros.
  spidev_test: `echo "spidev_test $*" >> "$LABGATE_FAKE_HW/tools/spi.log"
[ -e "$2" ] || { echo "can't open device: No such file or directory" >&2; exit 1; }
if [ -f "$LABGATE_FAKE_HW/tools/spi/\${2##*/}/loop" ]; then cat "$4" > "$6"; else head -c "$(wc -c < "$4")" /dev/zero > "$6"; fi
`,
  "spi-pipe": `echo "spi-pipe $*" >> "$LABGATE_FAKE_HW/tools/spi.log"
[ -e "$2" ] || { echo "$2: No such file or directory" >&2; exit 1; }
if [ -f "$LABGATE_FAKE_HW/tools/spi/\${2##*/}/loop" ]; then head -c "$4"; else head -c "$4" > /dev/null; head -c "$4" /dev/zero; fi
`,
  memtester: `echo "memtester $*" > "$LABGATE_FAKE_HW/tools/memtester.log"
code=0; [ -f "$LABGATE_FAKE_HW/tools/memtester-exit" ] && read code < "$LABGATE_FAKE_HW/tools/memtester-exit"
echo "memtester version 4.5.1 (64-bit)"; exit "$code"
`,
};

/** A PNG test card (colour bars), what a camera giving PNG or MJPEG frames saves. */
export function testCardPng(width = 160, height = 120): Buffer {
  const bars = [[235, 235, 235], [235, 235, 16], [16, 235, 235], [16, 235, 16], [235, 16, 235], [235, 16, 16], [16, 16, 235]];
  const rows = Buffer.alloc((width * 3 + 1) * height);
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) rows.set(bars[Math.floor((x * bars.length) / width)]!, y * (width * 3 + 1) + 1 + x * 3);
  }
  const chunk = (type: string, data: Buffer) => {
    const body = Buffer.concat([Buffer.from(type, "latin1"), data]);
    const out = Buffer.alloc(body.length + 8);
    out.writeUInt32BE(data.length, 0);
    body.copy(out, 4);
    out.writeUInt32BE(crc32(body), body.length + 4);
    return out;
  };
  const header = Buffer.alloc(13);
  header.writeUInt32BE(width, 0);
  header.writeUInt32BE(height, 4);
  header.set([8, 2, 0, 0, 0], 8);
  return Buffer.concat([Buffer.from("89504e470d0a1a0a", "hex"), chunk("IHDR", header), chunk("IDAT", deflateSync(rows)), chunk("IEND", Buffer.alloc(0))]);
}

export class FakeBoard {
  readonly root = tempDir("labgate-board-");
  readonly sys = join(this.root, "sys");
  readonly dev = join(this.root, "dev");
  readonly firmware = join(this.root, "firmware");
  /** The tool stand-ins; `PATH` of the server process while a test runs. */
  readonly bin = join(this.root, "bin");
  /** An empty directory: a PATH where no tool is found. */
  readonly noTools = join(this.root, "no-tools");
  private readonly savedPath = process.env.PATH;

  constructor() {
    mkdirSync(this.bin, { recursive: true });
    mkdirSync(this.noTools, { recursive: true });
    // The board's root is written into each stand-in: tests start with a clean environment, none of the server's variables.
    for (const [name, body] of Object.entries(TOOLS)) {
      writeFileSync(join(this.bin, name), `#!/bin/sh\nLABGATE_FAKE_HW='${this.root}'\n${body}`);
      chmodSync(join(this.bin, name), 0o755);
    }
    this.tools(true);
    this.reset();
  }

  /** The server config keys that point the hardware modules here. */
  get config() {
    return { sys_root: this.sys, dev_root: this.dev, firmware_root: this.firmware };
  }

  /** The stand-ins on the PATH (the real tools after them), or no tools at all. */
  tools(present: boolean): void {
    process.env.PATH = present ? `${this.bin}:${this.savedPath}` : this.noTools;
  }

  /** Only these stand-ins on the PATH, before the system's (which has neither spidev_test nor spi-pipe). */
  toolsOnly(...names: string[]): void {
    const dir = join(this.root, `only-${names.join("-")}`);
    mkdirSync(dir, { recursive: true });
    for (const name of names) if (!existsSync(join(dir, name))) symlinkSync(join(this.bin, name), join(dir, name));
    process.env.PATH = `${dir}:${this.savedPath}`;
  }

  /** A character device node below the board's root (the null device's numbers): needs root, as CI runs. */
  charDevice(path: string): this {
    mkdirSync(dirname(join(this.root, path)), { recursive: true });
    execFileSync("mknod", [join(this.root, path), "c", "1", "3"]);
    return this;
  }

  /** An empty board: no sysfs, /dev, firmware or tool answers. */
  reset(): void {
    for (const dir of [this.sys, this.dev, this.firmware, join(this.root, "tools")]) {
      rmSync(dir, { recursive: true, force: true });
      mkdirSync(dir, { recursive: true });
    }
    this.tools(true);
  }

  /** Writes a file below the board's root (`sys/class/net/eth0/speed`), making its directories. */
  file(path: string, content: string | Buffer = ""): this {
    mkdirSync(dirname(join(this.root, path)), { recursive: true });
    writeFileSync(join(this.root, path), content);
    return this;
  }

  dir(path: string): this {
    mkdirSync(join(this.root, path), { recursive: true });
    return this;
  }

  link(path: string, target: string): this {
    mkdirSync(dirname(join(this.root, path)), { recursive: true });
    symlinkSync(target, join(this.root, path));
    return this;
  }

  /** Attributes of one sysfs directory at once: `attrs("sys/class/net/eth0", {speed: "1000"})`. */
  attrs(dir: string, values: Record<string, string | number>): this {
    for (const [name, value] of Object.entries(values)) this.file(join(dir, name), `${value}\n`);
    return this;
  }

  remove(): void {
    process.env.PATH = this.savedPath;
    delete process.env.LABGATE_FAKE_HW;
    rmSync(this.root, { recursive: true, force: true });
  }
}

/** The board the samples in assets/testrun/samples/ were written for: every hardware sample passes on it. */
export function sampleBoard(board: FakeBoard): FakeBoard {
  board
    .attrs("sys/class/net/eth0", { speed: 1000, operstate: "up", carrier: 1, mtu: 1500, address: "02:00:00:12:34:56" })
    .attrs("sys/bus/usb/devices/1-1", { speed: 480, idVendor: "1a40", idProduct: "0101" })
    .attrs("sys/bus/usb/devices/1-1.2", { speed: 480, idVendor: "0bda", idProduct: "5411" })
    .attrs("sys/bus/iio/devices/iio:device0", { name: "xadc", in_voltage0_vcc_raw: 4505, in_voltage0_vcc_scale: "0.732421875" })
    .attrs("sys/bus/iio/devices/iio:device1", { name: "ltc2655", out_voltage0_raw: 0 })
    .attrs("sys/class/thermal/thermal_zone0", { type: "cpu-thermal", temp: 45000 })
    .attrs("sys/class/hwmon/hwmon0", { name: "tmp431", temp1_input: 31000 })
    .attrs("sys/block/mmcblk0", { size: 15523840 })
    .attrs("sys/block/mmcblk0/device", { type: "SD" })
    .file("dev/mmcblk0", Buffer.alloc(16 * 1024 * 1024))
    .attrs("sys/block/nvme0n1", { size: 1000215216 })
    .attrs("sys/class/gpio/gpio20", { direction: "in", value: 0 })
    .file("sys/class/gpio/export")
    .file("sys/class/gpio/unexport")
    .file("dev/gpiochip0")
    .file("tools/gpio/gpiochip0/17", "1\n")
    .dir("tools/i2c/0/0x1c")
    .dir("tools/i2c/0/0x70")
    .file("tools/i2c/1/0x58/0x81", "0x3a\n")
    .file("tools/i2c/1/0x58/0x82", "0x00\n")
    .charDevice("dev/spidev0.0")
    .file("tools/spi/spidev0.0/loop")
    .file("dev/video0")
    .file("sys/class/video4linux/video0/name", "HD Webcam\n")
    .file("tools/v4l2/video0/frame", testCardPng())
    .file("tools/v4l2/video0/driver", "uvcvideo")
    .file("tools/v4l2/video0/card", "HD Webcam")
    .attrs("sys/class/fpga_manager/fpga0", { firmware: "", state: "operating" })
    .file("firmware/blink.bit.bin", "bitstream");
  return board;
}
