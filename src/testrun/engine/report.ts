import { open, type FileHandle } from "node:fs/promises";
import { Readable } from "node:stream";
import { parse } from "csv-parse";
import { stringify } from "csv-stringify/sync";
import { csvCell, csvText } from "../../util/csv.ts";
import type { DeviceCounts, ReportSummary, StatusCounts } from "../schema.ts";

/** The reference's eight columns in its order. */
export const REFERENCE_COLUMNS = ["start time", "device name", "test name", "module", "duration", "message", "status", "artifacts"] as const;
export type ReportColumn = (typeof REFERENCE_COLUMNS)[number];
/** `seed`: six of them, labgate's default. */
export const SEED_COLUMNS: readonly ReportColumn[] = ["device name", "test name", "module", "duration", "message", "status"];

/**
 * `test_server.report_columns`: `seed`, `reference`, or names as the reference's `--csv-columns`
 * takes them (a list, or one comma-separated string; `_` stands for a space: `start_time`).
 * Returns an error message for anything else.
 */
export function parseReportColumns(value: unknown): ReportColumn[] | string {
  if (value === "seed") return [...SEED_COLUMNS];
  if (value === "reference") return [...REFERENCE_COLUMNS];
  const names = typeof value === "string" ? value.split(",") : Array.isArray(value) ? value : undefined;
  if (!names || names.length === 0) return `expected seed, reference or a list of column names (${REFERENCE_COLUMNS.join(", ")})`;
  const columns: ReportColumn[] = [];
  for (const name of names) {
    const column = typeof name === "string" ? name.trim().replace(/_/g, " ") : "";
    if (!(REFERENCE_COLUMNS as readonly string[]).includes(column)) return `unknown report column ${JSON.stringify(name)}; known: ${REFERENCE_COLUMNS.join(", ")}`;
    if (columns.includes(column as ReportColumn)) return `report column ${JSON.stringify(column)} is listed twice`;
    columns.push(column as ReportColumn);
  }
  return columns;
}

export type CaseStatus = "passed" | "failed" | "skipped";

export interface ReportRow {
  /** When the case (or the failing set-up) started. */
  startTime: Date;
  deviceName: string;
  testName: string;
  module: string;
  /** Seconds. */
  duration: number;
  message: string;
  status: CaseStatus;
  /** The case's recorded artifact names, then the run's metadata file names. */
  artifacts: string[];
  /** Not in the CSV (its columns are the reference's), in the JSON form: the entry's `name:` in the config. */
  name?: string;
  /** The board (managed device) the case ran on, in a run on devices. */
  board?: string;
  /** The end of the output of a failed case's program. */
  output?: string;
}

/** The longest output tail a row keeps (characters). */
export const OUTPUT_TAIL = 4096;
/** The end of `text`, at most OUTPUT_TAIL characters, starting at a line where it can. */
export function outputTail(text: string): string {
  const trimmed = text.trimEnd();
  if (trimmed.length <= OUTPUT_TAIL) return trimmed;
  const cut = trimmed.slice(-OUTPUT_TAIL);
  const line = cut.indexOf("\n");
  return `…${line >= 0 && line < 512 ? cut.slice(line) : cut}`;
}

/** The fields of a row beyond its CSV cells, kept in the report's details file: one JSON line per row. */
const detailsLine = (row: ReportRow, device: number | undefined): string => {
  const details: Record<string, string | number> = { device: device ?? -1 };
  if (row.name) details.name = row.name;
  if (row.board) details.board = row.board;
  if (row.output) details.output = row.output;
  return `${JSON.stringify(details)}\n`;
};

const pad = (n: number) => String(n).padStart(2, "0");
/** The reference's `start time`: the gateway's local time, ISO 8601 to the second, no offset. */
const localIsoSeconds = (d: Date): string =>
  `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;

/** A Python str repr, as the reference's list literal shows names: 'a', or "it's" when it holds a quote. */
const pyRepr = (s: string): string => {
  const quote = s.includes("'") && !s.includes('"') ? '"' : "'";
  return quote + s.replace(/\\/g, "\\\\").replace(new RegExp(quote, "g"), `\\${quote}`) + quote;
};

const CELLS: Record<ReportColumn, (row: ReportRow) => string | number> = {
  "start time": (row) => localIsoSeconds(row.startTime),
  "device name": (row) => row.deviceName,
  "test name": (row) => row.testName,
  module: (row) => row.module,
  // Microseconds are plenty; rounding also drops float noise such as 0.000020999999999958162.
  duration: (row) => Math.round(row.duration * 1e6) / 1e6,
  message: (row) => row.message,
  status: (row) => row.status,
  artifacts: (row) => `[${row.artifacts.map(pyRepr).join(", ")}]`,
};

// Python's csv writer: minimal quoting, CRLF records; no cell a spreadsheet would run (util/csv.ts).
const csvLine = (cells: Array<string | number>): string => stringify([cells.map(csvCell)], { record_delimiter: "windows", quoted: false });

/** A report row as read back from its CSV: each cell as it was before csvCell. */
const readBack = <T extends Record<string, string> | string[]>(row: T): T => {
  const cells = row as Record<string, unknown>;
  for (const key of Object.keys(cells)) if (typeof cells[key] === "string") cells[key] = csvText(cells[key]);
  return row;
};

/** One report row as its CSV line in `columns`. */
export const reportLine = (columns: readonly ReportColumn[], row: ReportRow): Buffer => Buffer.from(csvLine(columns.map((column) => CELLS[column](row))));

/**
 * Appends rows to a run's CSV report as the run progresses; `close` makes it durable. A report
 * of a run on devices also keeps its row index (`index`): the header's length, then for each row
 * the device it is of (its place in the run's `devices`) and its length, so that a reader who
 * may not see some devices is sent the report without their rows (openReportCsv). Its details
 * file (`details`) holds what a row says beyond the CSV's columns, one line per row in the same
 * order, each naming its device too (openReportDetails).
 */
export class ReportWriter {
  private readonly handle: FileHandle;
  private readonly index: FileHandle | undefined;
  private readonly details: FileHandle | undefined;
  private readonly columns: readonly ReportColumn[];
  private closed = false;
  private constructor(handle: FileHandle, index: FileHandle | undefined, details: FileHandle | undefined, columns: readonly ReportColumn[]) {
    this.handle = handle;
    this.index = index;
    this.details = details;
    this.columns = columns;
  }

  /** Creates (or truncates) the report (its row index and details file) and writes the header line of `columns`. */
  static async create(path: string, columns: readonly ReportColumn[] = SEED_COLUMNS, files: { index?: string; details?: string } = {}): Promise<ReportWriter> {
    const header = Buffer.from(csvLine([...columns]));
    const handle = await open(path, "w", 0o644);
    let indexHandle: FileHandle | undefined;
    let detailsHandle: FileHandle | undefined;
    try {
      await handle.write(header);
      indexHandle = files.index === undefined ? undefined : await open(files.index, "w", 0o644);
      await indexHandle?.write(`${header.length}\n`);
      detailsHandle = files.details === undefined ? undefined : await open(files.details, "w", 0o644);
    } catch (error) {
      await handle.close();
      await indexHandle?.close();
      await detailsHandle?.close();
      throw error;
    }
    return new ReportWriter(handle, indexHandle, detailsHandle, columns);
  }

  /** The row as it will be written (what it costs is known before it is queued). */
  line(row: ReportRow): Buffer {
    return reportLine(this.columns, row);
  }

  /** Appends a row (as `line`, when it was made already), of device `device` in a report with a row index. */
  async append(row: ReportRow, device?: number, line: Buffer = this.line(row)): Promise<void> {
    await this.handle.write(line);
    if (this.index) await this.index.write(`${device ?? -1} ${line.length}\n`);
    // Written after its CSV row: a row cut short by a crash has no details, a whole one has its own.
    if (this.details) await this.details.write(detailsLine(row, device));
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    try {
      await this.handle.sync();
      await this.index?.sync();
      await this.details?.sync();
    } finally {
      await this.handle.close();
      await this.index?.close();
      await this.details?.close();
    }
  }
}

/** What a row says beyond its CSV cells (ReportRow's `name`, `board`, `output`). */
export type RowDetails = Partial<Record<"name" | "board" | "output", string>>;

/**
 * A stream's lines; node:readline is loaded with the first report read, which no start makes
 * (through getBuiltinModule: the executable's bundle has no dynamic import()).
 */
const linesOf = (input: Readable) => process.getBuiltinModule("node:readline").createInterface({ input, crlfDelay: Infinity });

/**
 * The details of a report's rows, in their order, only those of the devices `keep` accepts (all
 * without it); nothing when the report has no details file. Memory for one line at a time.
 */
export async function* openReportDetails(path: string, keep?: (device: number) => boolean): AsyncGenerator<RowDetails> {
  const file = await open(path, "r").catch(() => undefined);
  if (!file) return;
  const stream = file.createReadStream();
  try {
    for await (const line of linesOf(stream)) {
      let parsed: unknown;
      try {
        parsed = JSON.parse(line);
      } catch {
        return;
      }
      if (!parsed || typeof parsed !== "object") return;
      const { device, ...details } = parsed as { device?: unknown } & RowDetails;
      if (keep && !(typeof device === "number" && keep(device))) continue;
      yield details;
    }
  } finally {
    stream.destroy();
  }
}

/** Reads of at most this many bytes when a report is filtered. */
const FILTER_CHUNK = 64 * 1024;

/**
 * The CSV report's bytes: the file itself, or with `keep` only the header and the rows of the
 * devices `keep` accepts, found by the row index at `index` (without one, the header alone: a
 * row of unknown device is never shown). Opens the report first: a missing one throws (ENOENT)
 * before anything is read.
 */
export async function openReportCsv(path: string, filter?: { index: string; keep: (device: number) => boolean }): Promise<Readable> {
  const report = await open(path, "r");
  if (!filter) return report.createReadStream();
  const read = async (start: number, length: number) => {
    const buffer = Buffer.alloc(length);
    const { bytesRead } = await report.read(buffer, 0, length, start);
    return buffer.subarray(0, bytesRead);
  };
  async function* rows(index: Readable, keep: (device: number) => boolean): AsyncGenerator<Buffer> {
    // The kept bytes run from `start` for `length`; consecutive kept rows are read at once.
    let position = -1;
    let start = 0;
    let length = 0;
    for await (const line of linesOf(index)) {
      if (position < 0) {
        const header = Number(line);
        position = length = Number.isSafeInteger(header) && header > 0 ? header : 0;
        continue;
      }
      const [device, bytes] = line.split(" ").map(Number);
      if (!Number.isSafeInteger(bytes) || bytes < 0) break;
      if (keep(device)) {
        if (start + length === position && length < FILTER_CHUNK) length += bytes;
        else {
          if (length > 0) yield await read(start, length);
          start = position;
          length = bytes;
        }
      }
      position += bytes;
    }
    if (length > 0) yield await read(start, length);
  }
  async function* headerOnly(): AsyncGenerator<Buffer> {
    const head = await read(0, FILTER_CHUNK);
    const end = head.indexOf("\n");
    yield end >= 0 ? head.subarray(0, end + 1) : head;
  }
  const index = await open(filter.index, "r").then(
    (handle) => handle.createReadStream(),
    () => undefined,
  );
  return Readable.from(
    (async function* () {
      try {
        yield* index ? rows(index, filter.keep) : headerOnly();
      } finally {
        index?.destroy();
        await report.close();
      }
    })(),
    { objectMode: false },
  );
}

/** Opens a report's CSV bytes for one pass (openReportCsv, filtered or not); `details`: its rows' details, as filtered. */
export type ReportSource = (() => Promise<Readable>) & { details?: () => AsyncGenerator<RowDetails> };

/** Each CSV row of `file` (as written) with its details, read side by side. */
async function* rowsOf(file: Readable, source: ReportSource): AsyncGenerator<Record<string, string>> {
  const details = source.details?.();
  try {
    // A row cut short by a crash mid-write (an unclosed quote) is left out rather than failing the answer.
    const parser = parse({ columns: true, skip_empty_lines: true, relax_column_count: true, skip_records_with_error: true });
    for await (const read of file.pipe(parser) as AsyncIterable<Record<ReportColumn, string>>) {
      const extra = details ? await details.next() : undefined;
      yield extra && !extra.done ? { ...readBack(read), ...extra.value } : readBack(read);
    }
  } finally {
    await details?.return(undefined);
  }
}

/**
 * The JSON form: one object per CSV row, keys = header names (so the configured columns),
 * values = the cell strings, and where the row has them `name` (the entry's), `board` and `output`.
 * Streamed row by row, so a report of any size costs memory for one row only. Opens the report
 * first: a missing report throws (ENOENT) before anything is sent.
 */
export async function openReportJson(source: ReportSource): Promise<{ stream: Readable; close(): Promise<void> }> {
  const file = await source();
  async function* json(): AsyncGenerator<Buffer> {
    // Rows are sent in chunks of about 64 KiB: one chunk per row costs more than the row itself.
    let pending = "[";
    let first = true;
    for await (const row of rowsOf(file, source)) {
      pending += (first ? "" : ",") + JSON.stringify(row);
      first = false;
      if (pending.length >= 65536) {
        yield Buffer.from(pending);
        pending = "";
      }
    }
    yield Buffer.from(pending + "]\n");
  }
  const stream = Readable.from(json(), { objectMode: false });
  // However the response ends (done, client gone, error), the file is closed.
  stream.once("close", () => file.destroy());
  return { stream, close: async () => void file.destroy() };
}

/** Devices with failures first, then by name. */
const failuresFirst = (a: DeviceCounts, b: DeviceCounts) =>
  Number(b.failed > 0) - Number(a.failed > 0) || (a.device < b.device ? -1 : a.device > b.device ? 1 : 0);

/**
 * Counts a report's rows by status, and with `byDevice` by device too, streaming (memory for one
 * row and the devices' counts). Throws ENOENT for a missing report.
 */
export async function reportSummary(source: ReportSource, options: { byDevice?: boolean } = {}): Promise<ReportSummary> {
  const file = await source();
  const summary: ReportSummary = { total: 0, passed: 0, failed: 0, skipped: 0, columns: [] };
  const devices = new Map<string, DeviceCounts>();
  try {
    const parser = parse({ skip_empty_lines: true, relax_column_count: true, skip_records_with_error: true });
    let statusAt = -1;
    let deviceAt = -1;
    for await (const read of file.pipe(parser) as AsyncIterable<string[]>) {
      const cells = readBack(read);
      if (summary.columns.length === 0) {
        summary.columns = cells;
        statusAt = cells.indexOf("status");
        deviceAt = cells.indexOf("device name");
        continue;
      }
      const status = cells[statusAt];
      const counts = [summary as StatusCounts];
      if (options.byDevice && deviceAt >= 0) {
        const device = cells[deviceAt] ?? "";
        if (!devices.has(device)) devices.set(device, { device, total: 0, passed: 0, failed: 0, skipped: 0 });
        counts.push(devices.get(device)!);
      }
      for (const c of counts) {
        c.total++;
        if (status === "passed" || status === "failed" || status === "skipped") c[status]++;
      }
    }
  } finally {
    file.destroy();
  }
  if (options.byDevice) summary.devices = [...devices.values()].sort(failuresFirst);
  return summary;
}

/**
 * The JSON form grouped by device (a run on managed devices): `[{device, total, passed, failed,
 * skipped, rows}]`, devices with failures first, each device's rows as in the JSON form. One
 * pass to count, then one per device, so memory stays that of one row whatever the report's size.
 */
export async function openReportJsonByDevice(source: ReportSource): Promise<{ stream: Readable; close(): Promise<void> }> {
  const { devices = [] } = await reportSummary(source, { byDevice: true });
  let current: Readable | undefined;
  let closed = false;
  async function* json(): AsyncGenerator<Buffer> {
    yield Buffer.from("[");
    for (const [i, counts] of devices.entries()) {
      if (closed) return;
      const { device, ...numbers } = counts;
      let pending = `${i > 0 ? "," : ""}${JSON.stringify({ device, ...numbers }).slice(0, -1)},"rows":[`;
      let first = true;
      const file = (current = await source());
      try {
        for await (const row of rowsOf(file, source)) {
          if (row["device name"] !== device) continue;
          pending += (first ? "" : ",") + JSON.stringify(row);
          first = false;
          if (pending.length >= 65536) {
            yield Buffer.from(pending);
            pending = "";
          }
        }
      } finally {
        file.destroy();
        current = undefined;
      }
      yield Buffer.from(pending + "]}");
    }
    yield Buffer.from("]\n");
  }
  const stream = Readable.from(json(), { objectMode: false });
  const close = async () => {
    closed = true;
    current?.destroy();
  };
  stream.once("close", () => void close());
  return { stream, close };
}
