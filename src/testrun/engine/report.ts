import { open, type FileHandle } from "node:fs/promises";
import { Readable } from "node:stream";
import { parse } from "csv-parse";
import { stringify } from "csv-stringify/sync";

/** Exactly the seed's six columns in the seed's order (test-run-server.md section 19). */
export const REPORT_COLUMNS = ["device name", "test name", "module", "duration", "message", "status"] as const;
export type ReportColumn = (typeof REPORT_COLUMNS)[number];

export type CaseStatus = "passed" | "failed" | "skipped";

export interface ReportRow {
  deviceName: string;
  testName: string;
  module: string;
  /** Seconds. */
  duration: number;
  message: string;
  status: CaseStatus;
}

// Python's csv writer: minimal quoting, CRLF records (8.2).
const csvLine = (cells: string[]): string => stringify([cells], { record_delimiter: "windows", quoted: false });

/** Appends rows to a run's CSV report as the run progresses; `close` makes it durable. */
export class ReportWriter {
  private readonly handle: FileHandle;
  private closed = false;
  private constructor(handle: FileHandle) {
    this.handle = handle;
  }

  /** Creates (or truncates) the report and writes the header line. */
  static async create(path: string): Promise<ReportWriter> {
    const handle = await open(path, "w", 0o644);
    await handle.write(csvLine([...REPORT_COLUMNS]));
    return new ReportWriter(handle);
  }

  async append(row: ReportRow): Promise<void> {
    // Microseconds are plenty; rounding also drops float noise such as 0.000020999999999958162.
    const duration = String(Math.round(row.duration * 1e6) / 1e6);
    await this.handle.write(csvLine([row.deviceName, row.testName, row.module, duration, row.message, row.status]));
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    try {
      await this.handle.sync();
    } finally {
      await this.handle.close();
    }
  }
}

/**
 * The JSON form (8.3): one object per CSV row, keys = header names, values = the cell strings.
 * Streamed row by row, so a report of any size costs memory for one row only. Opens the file
 * first: a missing report throws (ENOENT) before anything is sent.
 */
export async function openReportJson(path: string): Promise<{ stream: Readable; close(): Promise<void> }> {
  const handle = await open(path, "r");
  const file = handle.createReadStream();
  async function* json(): AsyncGenerator<Buffer> {
    // Rows are sent in chunks of about 64 KiB: one chunk per row costs more than the row itself.
    let pending = "[";
    let first = true;
    // A row cut short by a crash mid-write (an unclosed quote) is left out rather than failing the answer.
    const parser = parse({ columns: true, skip_empty_lines: true, relax_column_count: true, skip_records_with_error: true });
    for await (const row of file.pipe(parser) as AsyncIterable<Record<ReportColumn, string>>) {
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
  // However the response ends (done, client gone, error), the file handle is closed.
  stream.once("close", () => file.destroy());
  return { stream, close: async () => void file.destroy() };
}
