import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { parse } from "yaml";
import { TOOL_PACKAGES } from "../../src/testrun/modules/hardware.ts";
import { paramDocs } from "../../src/testrun/modules/params.ts";
import { BUILTIN_MODULES } from "../../src/testrun/modules/registry.ts";
import type { ModuleDef } from "../../src/testrun/modules/types.ts";
import { checkGeneratedDoc } from "../helpers/generated-doc.ts";

const DOC = "docs/modules.md";
const REGENERATE = "npm run modules-doc";
const SAMPLES = join("assets", "testrun", "samples");

const cell = (text: string) => text.replaceAll("|", "\\|").replaceAll("\n", " ");
/** A default as code, or as prose when it is a description (`the artifact directory`). */
const shown = (v: unknown) => (typeof v !== "string" ? `\`${JSON.stringify(v)}\`` : /\s/.test(v) ? v : `\`${v}\``);

/** A module's section: what it checks, its parameters from the zod schema, its cases and its sample. */
function section(m: ModuleDef): string[] {
  const sample = readFileSync(join(SAMPLES, `${m.key}.yml`), "utf8");
  // The sample's first entry of this module: its cases as a run of it reports them.
  const doc = parse(sample) as { tests: Record<string, Array<Record<string, Record<string, unknown>>>> };
  const entry = Object.values(doc.tests).flat().find((e) => m.key in e)![m.key]!;
  const cases = m.dynamicCases ? [] : m.cases({ params: entry, state: {} }).map((c) => `\`${c.name}\``);
  const rows = Object.entries(m.params.object.shape).map(([name, schema]) => {
    const info = paramDocs.get(schema);
    assert.ok(info?.description, `${m.key}.${name} has no description in its schema`);
    const fallback = schema.isOptional() ? (info.default === undefined ? "" : shown(info.default)) : "required";
    return `| \`${name}\` | ${info.type} | ${cell(fallback)} | ${cell(info.description)} |`;
  });
  assert.ok(m.summary, `${m.key} has no summary`);
  return [
    `## \`${m.key}\``,
    "",
    m.summary!,
    "",
    `Report rows: \`test.py::${m.className}::test_<case>[test_config<k>]\`.${m.compat ? " Offered only with `test_server.compat_modules: true`." : ""}`,
    "",
    ...(rows.length ? ["| parameter | type | default | meaning |", "| --- | --- | --- | --- |", ...rows, ""] : []),
    m.dynamicCases ? "Cases: `command`, then one per test case of the JUnit reports." : `Cases of the example, in run order: ${cases.join(", ")}.`,
    "",
    `Example (\`${SAMPLES}/${m.key}.yml\`, run by the samples test):`,
    "",
    "```yaml",
    sample.trimEnd(),
    "```",
    "",
  ];
}

test(`${DOC} documents every built-in module from its zod schema (${REGENERATE} rewrites it)`, () => {
  const text = [
    "# Test modules",
    "",
    "Every built-in module a test config's entry can name, with its parameters as the module's zod",
    "schema declares them (types, defaults, what they mean) and one example each. Written by",
    `\`test/testrun/modules-doc.test.ts\`, which fails when this file is stale: \`${REGENERATE}\` rewrites it.`,
    "",
    "Parameters are checked when a run is started (a wrong type or a missing required parameter is a",
    "422 naming the entry); unknown parameters are ignored with a warning on the run. A row of the",
    "report is one case: its test name is `<case>[test_config<k>]`, k counting the entries of the same",
    "module in the run.",
    "",
    "## Hardware modules on a board",
    "",
    "`network`, `usbdev`, `adc`, `dac`, `thermal`, `mmc`, `block`, `gpio`, `i2c`, `i2c_registers`,",
    "`spi`, `camera`, `memtester` and `fpga` keep protoplaster's module keys, parameter names, case names and",
    "messages, so its configs run unchanged on `labgate serve` on a lab board. A config names kernel",
    "interfaces as on the board (`/sys/...`, `/dev/...`, a firmware file name); the server reads them",
    "below `test_server.sys_root` (default `/sys`), `test_server.dev_root` (`/dev`) and",
    "`test_server.firmware_root` (`/lib/firmware`), never a root from the config. A path parameter",
    "must be under `/sys` or `/dev` and holds no `..` (a 422 otherwise); a path that leads out of its",
    "tree through a link (`/dev/fd`, a link to elsewhere) fails its case. Where the kernel",
    "interface needs an ioctl, the module runs the distribution's tool with the device path; a missing",
    "tool fails the case with the package to install (`spi` runs the kernel's `spidev_test` where the",
    "board has one, which Debian does not package, else `spi-pipe`):",
    "",
    "| tool | Debian package |",
    "| --- | --- |",
    ...Object.entries(TOOL_PACKAGES).map(([tool, pkg]) => `| \`${tool}\` | \`${pkg}\` |`),
    "",
    ...BUILTIN_MODULES.flatMap(section),
  ].join("\n");
  checkGeneratedDoc(DOC, text, "UPDATE_MODULES_DOC", REGENERATE);
});
