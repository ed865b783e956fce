/* The repeat pattern language (pattern.ts): pytest's `-k` expressions over a case's names. */
import assert from "node:assert/strict";
import { test } from "node:test";
import { compilePattern, MAX_PATTERN_LENGTH, PatternError, patternError } from "./pattern.ts";

/** The cases of `names` (each a case's names) that `pattern` selects, by their first name. */
const selected = (pattern: string, cases: string[][]): string[] => cases.filter(compilePattern(pattern)).map((names) => names[0]);

const CASES = [
  ["ping_gateway", "TestPing", "network"],
  ["ping_dns", "TestPing", "network"],
  ["i2c_probe", "TestI2C", "bus"],
  ["spi_loopback", "TestSPI", "bus"],
];

test("an identifier is a case-insensitive substring of any of the case's names; an empty pattern selects every case", () => {
  assert.deepEqual(selected("ping", CASES), ["ping_gateway", "ping_dns"]);
  assert.deepEqual(selected("TESTi2c", CASES), ["i2c_probe"], "the class name counts, in any case");
  assert.deepEqual(selected("bus", CASES), ["i2c_probe", "spi_loopback"]);
  assert.deepEqual(selected("", CASES), CASES.map((c) => c[0]));
  assert.deepEqual(selected("   ", CASES), CASES.map((c) => c[0]), "blanks only: empty");
  assert.deepEqual(selected("nothing", CASES), []);
});

test("not binds tighter than and, and tighter than or; parentheses group", () => {
  assert.deepEqual(selected("ping and not dns", CASES), ["ping_gateway"]);
  assert.deepEqual(selected("i2c or spi and loop", CASES), ["i2c_probe", "spi_loopback"], "or of (spi and loop)");
  assert.deepEqual(selected("(i2c or spi) and loop", CASES), ["spi_loopback"]);
  assert.deepEqual(selected("not not ping", CASES), ["ping_gateway", "ping_dns"]);
  assert.deepEqual(selected("not (network or bus)", CASES), []);
});

test("identifiers hold the characters pytest allows in names: parameter ids, paths, Unicode letters", () => {
  const cases = [["test_read[0x1c]", "dev/i2c-1"], ["prüfung.läuft", "x"], ["a:b+c", "y"]];
  assert.deepEqual(selected("[0x1c]", cases), ["test_read[0x1c]"]);
  assert.deepEqual(selected("dev/i2c-1", cases), ["test_read[0x1c]"]);
  assert.deepEqual(selected("PRÜFUNG", cases), ["prüfung.läuft"]);
  assert.deepEqual(selected("a:b+c", cases), ["a:b+c"]);
  assert.deepEqual(selected("orchid", [["orchid"]]), ["orchid"], "a keyword inside a word is part of the identifier");
});

test("malformed patterns: the column and what was expected, as pytest says it", () => {
  assert.equal(patternError("ping and"), "at column 9: expected not OR left parenthesis OR identifier; got end of input");
  assert.equal(patternError("(ping"), "at column 6: expected right parenthesis; got end of input");
  assert.equal(patternError("ping dns"), "at column 6: expected end of input; got dns");
  assert.equal(patternError("ping)"), "at column 5: expected end of input; got )");
  assert.equal(patternError("or ping"), "at column 1: expected not OR left parenthesis OR identifier; got or");
  assert.equal(patternError("ping & dns"), 'at column 6: unexpected character "&"');
  assert.equal(patternError("ping or dns"), undefined);
  assert.throws(() => compilePattern("not"), PatternError);
});

test("hostile patterns are refused before they cost the stack or the CPU", () => {
  assert.equal(patternError("a".repeat(MAX_PATTERN_LENGTH + 1)), `longer than ${MAX_PATTERN_LENGTH} characters`);
  assert.equal(patternError("(".repeat(200) + "a" + ")".repeat(200)), "nested more than 100 levels deep");
  assert.equal(patternError("not ".repeat(150) + "a"), "nested more than 100 levels deep");
  const long = Array.from({ length: 500 }, (_, i) => `n${i}`).join(" or ");
  assert.ok(long.length <= MAX_PATTERN_LENGTH);
  assert.deepEqual(selected(long, [["n499"], ["m"]]), ["n499"], "a long flat expression is fine");
});
