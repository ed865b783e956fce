/*
 * What every CSV labgate writes (the audit export, test-run reports) does to a cell: a text that a
 * spreadsheet would read as a formula is written with a leading `'` (OWASP's CSV injection rule),
 * and the report's JSON form, read back from its CSV, takes that `'` off again.
 */

/**
 * A text cell that starts with `=`, `+`, `-`, `@`, a tab or a CR, after any `'`s: the `'`s count
 * too, so that taking one off (`csvText`) gives back exactly the text that was written.
 */
const FORMULA = /^'*[=+\-@\t\r]/;

/**
 * A cell as it goes into a CSV file: texts that a spreadsheet would run as a formula get a leading
 * `'`. Numbers are written as they are: a number is never a formula, and a spreadsheet must read
 * the report's duration (or the audit's id) as a number, not as text.
 */
export function csvCell(value: string | number | null | undefined): string {
  if (value === null || value === undefined) return "";
  if (typeof value === "number") return String(value);
  return FORMULA.test(value) ? `'${value}` : value;
}

/** A text cell as it was before `csvCell` (the report's JSON form reads the CSV back). */
export const csvText = (cell: string): string => (cell.startsWith("'") && FORMULA.test(cell) ? cell.slice(1) : cell);
